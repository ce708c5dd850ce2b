"""The MLP's neurons: which of a layer's neurons moved one token's logit, at one position.

An MLP writes down_proj(a), a = act(gate_proj(x)) * up_proj(x) its neurons' activations (x: the stream after the
layer's attention, through the MLP's input norm). Column n of down_proj is what neuron n writes per unit of
activation, so the MLP's write is sum_n a_n W_down[:, n], and read through the frozen final norm and the unembedding
(dla.py) the logit of token t gets

    a_n * (W_down[:, n] . u),   u = W_U[t] * r * g  (r: the final norm's 1/rms at that position, frozen)

from neuron n, exactly summing to the MLP's part of that logit. Gemma 3 normalises the MLP's write again before it
joins the stream (post_feedforward_layernorm): its scale is frozen at the run's value the same way, so each column
is multiplied by it. At the last position this is the MLP's bar of the direct logit attribution split by neuron;
at an earlier position it reads that position's own next-token scores (the logit lens).
The activations are recomputed from the record (the stream and the MLP's own weights), no extra pass.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.attribution.dla import check_token
from pipeline.attribution.record import StepRecord, is_gemma, weights
from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel


@dataclass
class NeuronContributions:
    layer: int
    position: int
    target_id: int
    activations: np.ndarray  # (I,) a_n
    per_unit: np.ndarray  # (I,) W_down[:, n] . u: what one unit of activation adds to the logit
    mlp_part: float  # the MLP's write . u: the sum of every neuron's contribution, read from the record
    out_scale: np.ndarray | None  # (D,) Gemma: the output norm's frozen scale times its weight; None for Llama

    @property
    def contributions(self) -> np.ndarray:
        """(I,) a_n * (W_down[:, n] . u): each neuron's part of the logit."""
        return self.activations * self.per_unit

    def top(self, k: int = 10) -> list[int]:
        """The k neurons that moved the logit most (either way), largest first."""
        return [int(n) for n in np.argsort(-np.abs(self.contributions))[:k]]


def _mlp_parts(lm: LanguageModel, layer: int):
    """(the MLP's input norm, the MLP, Gemma's output norm or None) of block `layer`."""
    block = lm.model.model.layers[layer]
    if is_gemma(lm):
        return block.pre_feedforward_layernorm, block.mlp, block.post_feedforward_layernorm
    return block.post_attention_layernorm, block.mlp, None


def activations(rec: StepRecord, lm: LanguageModel, layer: int, position: int):
    """(I,) the neurons' activations at `position` (float64) and Gemma's frozen output scale ((D,) or None)."""
    import torch

    from pipeline.model.capture import layout_for

    norm_in, mlp, norm_out = _mlp_parts(lm, layer)
    mid = torch.from_numpy(rec.resid[layer, position] + rec.attn[layer, position]).float()[None]
    with torch.no_grad():
        x = norm_in(mid.to(lm.device, norm_in.weight.dtype))
        a = (mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))[0].double().cpu()
        scale = None
        if norm_out is not None:
            raw = a @ mlp.down_proj.weight.detach().double().cpu().T
            r = torch.rsqrt(raw.pow(2).mean() + norm_out.eps)
            scale = (r * layout_for(lm.model).norm_scale(norm_out).detach().double().cpu()).numpy()
    return a.numpy(), scale


def reading_direction(rec: StepRecord, lm: LanguageModel, target_id: int, position: int) -> np.ndarray:
    """(D,) u = W_U[t] * r * g at `position`: the final norm's scale frozen there."""
    w_u, g, eps, _, _ = weights(lm)
    x = rec.resid[-1, position].astype(np.float64)
    r = 1.0 / np.sqrt(np.mean(x * x) + eps)
    return w_u[target_id].numpy().astype(np.float64) * r * g.numpy().astype(np.float64)


def neuron_contributions(rec: StepRecord, lm: LanguageModel, layer: int, target_id: int,
                         position: int = -1) -> NeuronContributions:
    """Each neuron of `layer`'s MLP: its activation at `position` and its part of `target_id`'s logit there."""
    L, T = lm.dims.L, len(rec.ids)
    target_id = check_token("target", target_id, lm.dims.V)
    if not 0 <= layer < L:
        raise InputError("layer", f"must be between 0 and {L - 1}, got {layer}.")
    if not -T <= position < T:
        raise InputError("position", f"must be between 0 and {T - 1}, got {position}.")
    position %= T
    a, scale = activations(rec, lm, layer, position)
    u = reading_direction(rec, lm, target_id, position)
    columns = _mlp_parts(lm, layer)[1].down_proj.weight.detach().double().cpu().numpy()  # (D, I)
    per_unit = (u if scale is None else u * scale) @ columns
    return NeuronContributions(layer, position, target_id, a, per_unit,
                               float(rec.mlp[layer, position].astype(np.float64) @ u), scale)


def promoted_by_neuron(rec: StepRecord, lm: LanguageModel, nc: NeuronContributions, neuron: int,
                       k: int = 5) -> list[tuple[int, float]]:
    """The k tokens whose logits neuron `neuron`'s write (its activation times its column) raises most at the
    position, through the frozen final norm and the unembedding: [(id, logit change)]."""
    w_u, g, eps, _, _ = weights(lm)
    column = _mlp_parts(lm, nc.layer)[1].down_proj.weight[:, neuron].detach().double().cpu().numpy()
    write = nc.activations[neuron] * column * (1.0 if nc.out_scale is None else nc.out_scale)
    x = rec.resid[-1, nc.position].astype(np.float64)
    scores = w_u.numpy() @ (write / np.sqrt(np.mean(x * x) + eps) * g.numpy()).astype(np.float32)
    order = np.argsort(-scores)[:k]
    return [(int(i), float(scores[i])) for i in order]
