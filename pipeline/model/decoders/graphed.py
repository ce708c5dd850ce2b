"""The plain decoder's one-token step with shapes that never change, so that on CUDA it can be captured once as a
CUDA graph and replayed: one launch per step instead of hundreds of small kernels (on a GPU a small model's decode
step is bound by those launches, not by memory).

What makes the step capturable, and what differs from PlainDecoder's step:
- the token and its position are read from two tensors (`token`, `position`, shape (1,)) written before each
  step, not passed as Python numbers: the captured kernels read the same memory at every replay;
- the new key and value go into the preallocated cache (L, 1, Hkv, T_max, Dh) with index_copy_ at `position`;
- attention reads all T_max positions with a mask (positions after `position` hidden), not the slice [:T + 1],
  so no shape depends on how far the answer has got; the cache starts zeroed so the hidden rows hold finite
  numbers (a hidden NaN would still spread through the softmax's product with the values);
- the logits are written into one output tensor (`logits`), copied out after each step.

On a CPU the same static step runs eagerly (its logic is tested there, greedy ids equal to PlainDecoder's and HF's
generate); on CUDA the first step warms it up on a side stream, captures it into a torch.cuda.CUDAGraph and replays
it from then on. Prefill and multi-token passes (speculative verify) are PlainDecoder's own, on the same cache.

    dec = GraphedDecoder(lm, max_positions=len(ids) + 64)
    logits = dec.prefill(ids)                # (V,)
    logits = dec.step(int(logits.argmax()))  # (V,): one replay of the captured step on CUDA
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from pipeline.model.decoders.plain import PlainDecoder, next_position, project, rms_norm
from pipeline.model.interface import LanguageModel
from pipeline.model.rope import rotate

WARM_UP_RUNS = 3  # eager runs on a side stream before the capture (CUDA's lazy set-up must not land in the graph)


class GraphedDecoder(PlainDecoder):
    """PlainDecoder whose one-token step has fixed shapes: captured as a CUDA graph on CUDA, run eagerly elsewhere."""

    def __init__(self, lm: LanguageModel, max_positions: int):
        super().__init__(lm, max_positions)
        self.keys.zero_()  # hidden positions are masked out: they must hold finite numbers, not torch.empty's bits
        self.values.zero_()
        device = self.embed.device
        self.token = torch.zeros(1, dtype=torch.long, device=device)  # (1,) the step's input token
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # (1,) where it goes
        self.slots = torch.arange(max_positions, device=device)  # (T_max,) every cache position
        self.logits = torch.zeros(self.head_width(), dtype=torch.float32, device=device)  # (V,) the step's output
        self.graph = None  # torch.cuda.CUDAGraph once captured
        self.captures = 0  # how many times the step was captured (once per decoder on CUDA, 0 elsewhere)

    def head_width(self) -> int:
        """V, the logits' length (the LM head's rows)."""
        return self.lm.model.get_output_embeddings().weight.shape[0]

    def step(self, token: int) -> torch.Tensor:
        """One more token at position T through the static step (a replay on CUDA). Returns logits (V,)."""
        t = next_position(self.keys, self.T, 1)
        with self.lm.lock, torch.inference_mode():
            self.token.fill_(token)
            self.position.fill_(t)
            if self.embed.device.type != "cuda":
                self.static_step()
            elif self.graph is None:
                self._capture()
            else:
                self.graph.replay()
            self.lm.count_pass()
            out = self.logits.clone()  # the next step overwrites self.logits
        self.T = t + 1
        return out

    def static_step(self) -> None:
        """The token in `token` at `position` through every block, the logits written into `logits` (V,). Fixed
        shapes, no Python branch on a tensor's value: the same kernels every call (what a CUDA graph records)."""
        h = self.embed.index_select(0, self.token)  # (1, D)
        cos, sin = self.cos.index_select(0, self.position), self.sin_signed.index_select(0, self.position)  # (1, Dh)
        seen = (self.slots <= self.position)[None, None, None]  # (1, 1, 1, T_max): positions up to this one
        for i, w in enumerate(self.layers):
            x = rms_norm(h, w.norm1, self.eps)
            q = rotate(project(x, w.q).view(1, self.H, self.Dh).transpose(0, 1), cos, sin)  # (H, 1, Dh)
            k = rotate(project(x, w.k).view(1, self.Hkv, self.Dh).transpose(0, 1), cos, sin)  # (Hkv, 1, Dh)
            v = project(x, w.v).view(1, self.Hkv, self.Dh).transpose(0, 1)  # (Hkv, 1, Dh)
            self.keys[i, 0].index_copy_(1, self.position, k)  # (Hkv, T_max, Dh): row `position` written
            self.values[i, 0].index_copy_(1, self.position, v)
            out = F.scaled_dot_product_attention(q[None], self.keys[i], self.values[i], attn_mask=seen,
                                                 scale=self.scale, enable_gqa=True)  # (1, H, 1, Dh)
            h = h + project(out[0].transpose(0, 1).reshape(1, self.H * self.Dh), w.o)  # (1, D)
            x = rms_norm(h, w.norm2, self.eps)
            h = h + project(F.silu(project(x, w.gate)) * project(x, w.up), w.down)
        self.logits.copy_(project(rms_norm(h, self.final_norm, self.eps), self.head)[0])  # (V,) as float32

    def _capture(self) -> None:
        """Warm the step up on a side stream, then record it into a CUDA graph and replay it once (this step's
        own run: the warm-up wrote the same key/value at the same position, and the capture runs nothing)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARM_UP_RUNS):
                self.static_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads' CUDA calls (a server's
            self.static_step()  # sampler, another request's prefill) may go on during the capture
        self.graph, self.captures = graph, self.captures + 1
        graph.replay()
