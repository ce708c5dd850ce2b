"""One captured pass over the ids that produced a decode step's scores: what attribution reads.

Step S's scores come from the prompt plus the first S generated tokens; `record_step` runs one forward
pass over those ids (under `lm.lock`, counted by `lm.forward`) with hooks on every block and keeps, as
float32 numpy arrays on the CPU:

  embeddings  (T, D)        the residual stream before block 0 (Gemma: already times sqrt(D))
  resid       (L+1, T, D)   the residual stream before block i; [L] = after the last block
  attn, mlp   (L, T, D)     what attention and the MLP add to the stream (Gemma: after their post-norms)
  z           (L, T, H*Dh)  the heads' mixed values, the input of o_proj (head h is the slice h*Dh:(h+1)*Dh)
  pattern     (L, H, T, T)  attention weights (eager kernel), float16
  v           (L, T, Hkv*Dh) value projections
  post_scale  (L, T)        Gemma: the post-attention norm's 1/rms for each position (1 for Llama)

With these every part of the stream is a linear map of what was captured, once the norms' scales are
frozen at the run's values: hidden[L] = embeddings + sum_i (attn[i] + mlp[i]) exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel

MAX_POSITIONS = 512  # (L, H, T, T) float16 weights: 30 x 9 x 512^2 x 2 B = 142 MB at the most


@dataclass
class StepRecord:
    ids: list[int]
    resid: np.ndarray
    attn: np.ndarray
    mlp: np.ndarray
    z: np.ndarray
    pattern: np.ndarray
    v: np.ndarray
    post_scale: np.ndarray
    logits: np.ndarray  # (V,) the model's own scores for the next token after ids

    @property
    def embeddings(self) -> np.ndarray:
        return self.resid[0]


def step_ids(prompt_ids: list[int], generated_ids: list[int], step: int) -> list[int]:
    """The ids whose last position scored decode step `step`: the prompt and the first `step` tokens chosen."""
    if not 0 <= step < max(len(generated_ids), 1):
        raise InputError("step", f"must be between 0 and {max(len(generated_ids) - 1, 0)}, got {step}.")
    return list(prompt_ids) + list(generated_ids[:step])


def is_gemma(lm: LanguageModel) -> bool:
    from pipeline.model.capture import Gemma3Layout, layout_for

    return layout_for(lm.model) is Gemma3Layout


def check_head(lm: LanguageModel) -> None:
    """Attribution reads the logits as head(norm(x)): a soft cap after the head would make them nonlinear."""
    cap = getattr(lm.config, "final_logit_softcapping", None)
    if cap:
        raise InputError("model", f"this model soft-caps its logits (final_logit_softcapping = {cap}); "
                                  "direct logit attribution here assumes a plain linear head.")


def record_step(lm: LanguageModel, ids: list[int]) -> StepRecord:
    """One eager pass over `ids` with every hook attribution needs (see the module docstring)."""
    import torch

    from pipeline.model.capture import block_names, capture

    check_head(lm)
    if not ids:
        raise InputError("ids", "nothing to attribute: no tokens.")
    if len(ids) > MAX_POSITIONS:
        raise InputError("step", f"attribution reads at most {MAX_POSITIONS} positions (this step has {len(ids)}).")
    L = lm.dims.L
    layers = lm.model.model.layers
    z: list = [None] * L
    handles = []
    names = (["embeddings"] + block_names(L, "hidden_states") + block_names(L, "attn_out")
             + block_names(L, "mlp_out") + block_names(L, "v"))
    with lm.lock, capture(lm, names) as rec, capture(lm, block_names(L, "attention"), torch.float16) as pat:
        try:
            for i, block in enumerate(layers):
                def keep(_m, args, i=i):
                    z[i] = args[0].detach().float().cpu()
                handles.append(block.self_attn.o_proj.register_forward_pre_hook(keep))
            out = lm.forward(torch.tensor([ids], device=lm.device), use_cache=False, attention="eager")
        finally:
            for h in handles:
                h.remove()
    one = lambda name: rec[name][0][0].float().numpy()  # noqa: E731  (1, T, ...) -> (T, ...)
    resid = np.stack([one("embeddings")] + [one(f"blocks.{i}.hidden_states") for i in range(L)])
    zs = np.stack([t[0].numpy() for t in z])
    post = np.ones((L, len(ids)), np.float32)
    if is_gemma(lm):  # attn_out = post_norm(o_proj(z)): frozen per position, 1/rms of o_proj's output
        for i, block in enumerate(layers):
            o = torch.from_numpy(zs[i]) @ block.self_attn.o_proj.weight.detach().float().cpu().T
            eps = block.post_attention_layernorm.eps
            post[i] = torch.rsqrt(o.pow(2).mean(-1) + eps).numpy()
    return StepRecord(
        ids=list(ids), resid=resid,
        attn=np.stack([one(f"blocks.{i}.attn_out") for i in range(L)]),
        mlp=np.stack([one(f"blocks.{i}.mlp_out") for i in range(L)]),
        z=zs, pattern=np.stack([pat[f"blocks.{i}.attention"][0][0].numpy() for i in range(L)]),
        v=np.stack([one(f"blocks.{i}.v") for i in range(L)]), post_scale=post,
        logits=out.logits[0, -1].float().cpu().numpy())


def weights(lm: LanguageModel):
    """The fixed matrices the maths applies by hand, float32 on the CPU: (W_U (V, D), final norm scale (D,), eps,
    [W_O (D, H*Dh) per layer], [post-attention norm scale (D,) per layer, or None])."""
    from pipeline.model.capture import final_norm_scale, layout_for

    model = lm.model
    norm = model.model.norm
    eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", getattr(lm.config, "rms_norm_eps", 1e-6))))
    layout = layout_for(model)
    w_o = [b.self_attn.o_proj.weight.detach().float().cpu() for b in model.model.layers]
    post = ([layout.norm_scale(b.post_attention_layernorm).detach().float().cpu() for b in model.model.layers]
            if is_gemma(lm) else None)
    return (model.get_output_embeddings().weight.detach().float().cpu(),
            final_norm_scale(model).detach().float().cpu(), eps, w_o, post)
