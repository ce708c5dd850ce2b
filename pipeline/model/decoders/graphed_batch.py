"""The room's batched decode step with shapes that depend only on a bucket, so that on CUDA each bucket's step is
captured once as a CUDA graph and replayed (GraphedDecoder's idea, pipeline.model.decoders.graphed, for a batch).

A bucket is (B, T): B rows (the live answers padded up to a power of two, `batch_bucket`) and T cache positions
per row (the longest row's need rounded up to a power of two, at least MIN_POSITIONS, `position_bucket`). Every
tensor the step touches has a shape fixed by the bucket alone:
- each row's token and position are read from two (B,) tensors written before each step; the padding rows hold
  token 0 at position 0 (their outputs are ignored; they write only their own slot 0, rewritten when a row joins);
- a row keeps its positions 0 ... n-1 in slots 0 ... n-1 of its own cache row (no left padding): the new key and
  value go in with scatter_ at the row's position, and attention reads all T slots with a per-row mask (slots
  after the row's position hidden), so rows at different lengths step together;
- the logits go into one (B, V) output tensor.

Every bucket's cache is a view of one flat buffer (the largest bucket so far, grown by doubling): a bucket change
moves the live rows through a copy (GraphedBatchDecoder does). Growing the buffer drops the graphs captured on the
old one. On a CPU the same step runs eagerly (tested there); on CUDA a bucket's first step warms it up on a side
stream, captures it into a torch.cuda.CUDAGraph and later steps replay it (all graphs share one memory pool: a step
keeps nothing it allocates past its own end, its outputs go into the bucket's tensors, and steps never overlap); the
graphs are kept by this object, so a new request in a bucket that was seen before does not capture again.

    graphs = GraphedBatch(lm)
    bucket = graphs.bucket(batch_bucket(3), position_bucket(200))   # B=4, T=256
    bucket.keys[:, 0, :, :n] = ...                                    # a row's prefill K/V (L, Hkv, n, Dh)
    bucket.tokens.copy_(...); bucket.positions.copy_(...)             # (B,) each
    logits = graphs.step(bucket)                                      # (B, V) float32
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pipeline.model.decoders.graphed import WARM_UP_RUNS
from pipeline.model.decoders.plain import PlainDecoder, project, rms_norm
from pipeline.model.interface import LanguageModel
from pipeline.model.rope import model_tables, rotate

MIN_POSITIONS = 64  # the smallest position bucket


def _power_of_two_at_least(n: int) -> int:
    return 1 << (n - 1).bit_length()


def batch_bucket(rows: int, max_batch: int | None = None) -> int:
    """Rows a step runs for `rows` live answers: the next power of two, but not above max_batch when they fit in
    it. 1 -> 1, 3 -> 4, 5 -> 8, 17 -> 32; 20 with max_batch 24 -> 24."""
    if rows < 1:
        raise ValueError(f"a batch has at least one row, not {rows}")
    size = _power_of_two_at_least(rows)
    return min(size, max_batch) if max_batch is not None and rows <= max_batch else size


def position_bucket(positions: int) -> int:
    """Cache positions per row for a longest need of `positions`: the next power of two, at least MIN_POSITIONS.
    10 -> 64, 65 -> 128, 1000 -> 1024."""
    if positions < 1:
        raise ValueError(f"a row needs at least one position, not {positions}")
    return max(MIN_POSITIONS, _power_of_two_at_least(positions))


@dataclass
class Bucket:
    """One bucket's static tensors. keys, values: (L, B, Hkv, T, Dh) views of GraphedBatch's buffer; tokens,
    positions: (B,) long; logits: (B, V) float32."""
    B: int
    T: int
    keys: torch.Tensor
    values: torch.Tensor
    tokens: torch.Tensor
    positions: torch.Tensor
    logits: torch.Tensor
    graph: object = None  # torch.cuda.CUDAGraph once captured


class GraphedBatch:
    """The batched static step of one Llama-architecture model, with its buckets (and their graphs on CUDA)."""

    def __init__(self, lm: LanguageModel, max_batch: int | None = None):
        self.lm, self.max_batch = lm, max_batch
        self.w = PlainDecoder(lm, 1)  # the weights (views) and dimensions; its own one-position cache is unused
        self.device, self.dtype = self.w.embed.device, self.w.embed.dtype
        self.V = lm.model.get_output_embeddings().weight.shape[0]
        self.buffer = torch.zeros(0, device=self.device, dtype=self.dtype)  # every bucket's keys and values
        self.cos = self.sin = self.slots = None  # (T_cap, Dh), (T_cap, Dh), (T_cap,): for the largest T so far
        self.buckets: dict[tuple[int, int], Bucket] = {}
        self.captures = 0  # graphs captured so far (0 off CUDA)
        self.pool = None  # the graphs' shared memory pool (CUDA)

    def bucket(self, B: int, T: int) -> Bucket:
        """The bucket (B, T): made on first use. A bigger one than the buffer holds grows the buffer (doubling) and
        drops every bucket made before (their graphs point at the old buffer): copy live rows out first."""
        if (B, T) in self.buckets:
            return self.buckets[(B, T)]
        with torch.inference_mode():  # the steps write them in inference mode
            return self._make(B, T)

    def _make(self, B: int, T: int) -> Bucket:
        w = self.w
        shape = (len(w.layers), B, w.Hkv, T, w.Dh)
        n = shape[0] * B * w.Hkv * T * w.Dh
        cap = self.slots.shape[0] if self.slots is not None else 0
        if 2 * n > self.buffer.numel() or T > cap:
            cap = max(T, cap)
            self.buffer = torch.zeros(max(2 * n, 2 * self.buffer.numel()), device=self.device, dtype=self.dtype)
            self.cos, self.sin = model_tables(self.lm.model.model.rotary_emb, cap, self.device, self.dtype)
            self.slots = torch.arange(cap, device=self.device)
            self.buckets.clear()
        b = Bucket(B, T, self.buffer[:n].view(shape), self.buffer[n:2 * n].view(shape),
                   torch.zeros(B, dtype=torch.long, device=self.device),
                   torch.zeros(B, dtype=torch.long, device=self.device),
                   torch.zeros(B, self.V, dtype=torch.float32, device=self.device))
        self.buckets[(B, T)] = b
        return b

    def step(self, b: Bucket) -> torch.Tensor:
        """Every row's token (b.tokens) at its position (b.positions) through the model: one replay on CUDA.
        Returns a copy of the logits (B, V) float32. The caller keeps every position below b.T (nothing is read
        back from the device here to check it)."""
        with self.lm.lock, torch.inference_mode():
            if self.device.type != "cuda":
                self.static_step(b)
            elif b.graph is None:
                self._capture(b)
            else:
                b.graph.replay()
            self.lm.count_pass()
            return b.logits.clone()

    def static_step(self, b: Bucket) -> None:
        """The step of bucket b: fixed shapes, no Python branch on a tensor's value (what a CUDA graph records)."""
        w, B = self.w, b.B
        h = w.embed.index_select(0, b.tokens)  # (B, D)
        cos = self.cos.index_select(0, b.positions)[:, None, None]  # (B, 1, 1, Dh)
        sin = self.sin.index_select(0, b.positions)[:, None, None]
        seen = (self.slots[:b.T][None] <= b.positions[:, None])[:, None, None]  # (B, 1, 1, T): up to each position
        where = b.positions.view(B, 1, 1, 1).expand(B, w.Hkv, 1, w.Dh)  # each row's slot, for scatter_
        for i, layer in enumerate(w.layers):
            x = rms_norm(h, layer.norm1, w.eps)
            q = rotate(project(x, layer.q).view(B, w.H, 1, w.Dh), cos, sin)  # (B, H, 1, Dh)
            k = rotate(project(x, layer.k).view(B, w.Hkv, 1, w.Dh), cos, sin)  # (B, Hkv, 1, Dh)
            v = project(x, layer.v).view(B, w.Hkv, 1, w.Dh)
            b.keys[i].scatter_(2, where, k)  # (B, Hkv, T, Dh): each row's slot `position` written
            b.values[i].scatter_(2, where, v)
            out = F.scaled_dot_product_attention(q, b.keys[i], b.values[i], attn_mask=seen, scale=w.scale,
                                                 enable_gqa=True)  # (B, H, 1, Dh)
            h = h + project(out.reshape(B, w.H * w.Dh), layer.o)  # (B, D)
            x = rms_norm(h, layer.norm2, w.eps)
            h = h + project(F.silu(project(x, layer.gate)) * project(x, layer.up), layer.down)
        b.logits.copy_(project(rms_norm(h, w.final_norm, w.eps), w.head))  # (B, V) as float32

    def _capture(self, b: Bucket) -> None:
        """Warm bucket b's step up on a side stream, record it into a CUDA graph (in the shared pool) and replay it
        once: this step's own run (the warm-up wrote the same keys and values at the same positions)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARM_UP_RUNS):
                self.static_step(b)
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            self.static_step(b)
        b.graph, self.captures = graph, self.captures + 1
        graph.replay()
