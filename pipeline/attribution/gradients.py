"""Input attribution on the embeddings for one token's log-probability (as Captum's InputXGradient and
IntegratedGradients do; Captum itself is not a dependency).

  f(E)       = log softmax(model(inputs_embeds = E))[last position, target]
  grad x in  = sum_D  E * df/dE                                      (one backward pass)
  IG         = sum_D  (E - E0) * sum_k w_k df/dE(E0 + a_k (E - E0))  (nodes a_k in [0, 1], weights w_k summing to 1)

Completeness: the IG attributions sum to f(E) - f(E0), up to the quadrature's error
(`InputAttribution.completeness_gap` says how far off a run is).

The baseline E0. Captum's default is 0 (`baseline="zero"` here), but in these models the path from 0 starts at
a point the network treats specially: every RMSNorm divides out the scale a of its input until a is so small
that its epsilon takes over, and with several norms in a row (four per Gemma block) f jumps between a = 0 and
a = 1e-12. No quadrature sees a jump that narrow, so completeness fails there (by 14-30 % on a tiny Gemma). The
default, `baseline="reference"`, puts one reference token's embedding at every position (the end token, as
Captum's TokenReferenceBase puts a padding token; the mean embedding row would be ~0 in a random model): the path
never comes near 0, f is smooth along it, and Gauss-Legendre nodes (Captum's default rule) reach completeness
within 0.1 % with 10-20 steps on tiny Llama and Gemma models. For the zero baseline the nodes sit on
panels that shrink towards 0 ([0, 1e-12], ..., [0.1, 1]), which is enough for a Llama (its stream is one norm
deep at the embeddings).
Passes run under `lm.lock` with gradients on (`lm.forward` is inference-only) and count themselves.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel

MAX_STEPS = 128
BATCH_ROWS = 2048  # positions per pass (steps x T): bounds memory on a long prompt
BASELINES = ("reference", "zero")
PANELS = (0.0, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # the zero baseline's quadrature


@dataclass
class InputAttribution:
    target_id: int
    baseline: str
    log_prob: float  # f(E)
    baseline_log_prob: float  # f(E0)
    grad_x_input: np.ndarray  # (T,)
    integrated: np.ndarray  # (T,)
    steps: int

    @property
    def completeness_gap(self) -> float:
        """|sum IG - (f(E) - f(E0))| / |f(E) - f(E0)|: 0 for an exact integral."""
        want = self.log_prob - self.baseline_log_prob
        return abs(float(self.integrated.sum()) - want) / max(abs(want), 1e-12)


def quadrature(steps: int, panels: tuple = (0.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
    """(steps,) nodes in [0, 1] and their weights (summing to 1): Gauss-Legendre on each panel, the steps
    shared between the panels (at least one node each)."""
    n = len(panels) - 1
    per = [steps // n + (1 if k < steps % n else 0) for k in range(n)]
    nodes, weights = [], []
    for (lo, hi), k in zip(zip(panels, panels[1:]), per):
        x, w = np.polynomial.legendre.leggauss(max(k, 1))
        nodes.append(lo + (x + 1) / 2 * (hi - lo))
        weights.append(w / 2 * (hi - lo))
    return np.concatenate(nodes), np.concatenate(weights)


def reference_id(lm: LanguageModel) -> int:
    """The token the "reference" baseline puts at every position: the end token, else the start token, else the
    padding token; never a row the embedding keeps at 0 (a padding row), which would be the zero baseline again."""
    tok = lm.tokenizer
    rows = lm.model.get_input_embeddings().weight
    for i in (tok.eos_token_id, tok.bos_token_id, tok.pad_token_id):
        if i is not None and bool(rows[i].abs().sum() > 0):
            return int(i)
    raise InputError("baseline", "no end, start or padding token with a non-zero embedding: use the zero baseline.")


def _log_prob_and_grad(lm: LanguageModel, embeds, target_id: int):
    """(B, T, D) embeddings -> ((B,) log p(target) at the last position, (B, T, D) its gradient)."""
    import torch

    x = embeds.detach().clone().requires_grad_(True)
    with lm.lock, torch.enable_grad():
        lm.count_pass()
        logits = lm.model(inputs_embeds=x, use_cache=False, logits_to_keep=1).logits[:, -1].float()
        lp = torch.log_softmax(logits, dim=-1)[:, target_id]
        (grad,) = torch.autograd.grad(lp.sum(), x)
    return lp.detach(), grad.detach()


def input_attribution(lm: LanguageModel, ids: list[int], target_id: int, steps: int = 30,
                      baseline: str = "reference", positions: list[int] | None = None) -> InputAttribution:
    """Gradient x input and integrated gradients per position (see the module docstring for the baseline).
    `positions`: the positions that travel from the baseline (default all); the others keep their own
    embedding all along the path, so their integrated gradient is 0 and the rest still sums to f(E) - f(E0)."""
    import torch

    if baseline not in BASELINES:
        raise InputError("baseline", f"must be one of {', '.join(BASELINES)}, got {baseline!r}.")
    low = len(PANELS) - 1 if baseline == "zero" else 1
    if not low <= steps <= MAX_STEPS:
        raise InputError("steps", f"must be between {low} and {MAX_STEPS}, got {steps}.")
    if not 0 <= target_id < lm.dims.V:
        raise InputError("target", f"must be a token id between 0 and {lm.dims.V - 1:,}, got {target_id}.")
    emb_module = lm.model.get_input_embeddings()
    dtype = emb_module.weight.dtype
    with torch.no_grad():
        e = emb_module(torch.tensor([ids], device=lm.device)).float()  # (1, T, D), Gemma: already times sqrt(D)
        e0 = torch.zeros_like(e) if baseline == "zero" else \
            emb_module(torch.tensor([[reference_id(lm)] * len(ids)], device=lm.device)).float()
        if positions is not None:
            if not all(0 <= p < len(ids) for p in positions):
                raise InputError("positions", f"must be positions between 0 and {len(ids) - 1}.")
            keep = torch.ones(len(ids), dtype=torch.bool, device=e.device)
            keep[list(positions)] = False
            e0 = e0.clone()
            e0[0, keep] = e[0, keep]
    lp, grad = _log_prob_and_grad(lm, e.to(dtype), target_id)
    gxi = (e * grad.float()).sum(-1)[0].cpu().numpy()
    base_lp, _ = _log_prob_and_grad(lm, e0.to(dtype), target_id)
    alphas, w = quadrature(steps, PANELS if baseline == "zero" else (0.0, 1.0))
    total = torch.zeros_like(e[0])
    per = max(1, BATCH_ROWS // len(ids))
    for start in range(0, steps, per):
        a = torch.tensor(alphas[start:start + per], dtype=e.dtype, device=e.device)[:, None, None]
        _, g = _log_prob_and_grad(lm, (e0 + a * (e - e0)).to(dtype), target_id)
        total += (g.float() * torch.tensor(w[start:start + per], dtype=e.dtype, device=e.device)[:, None, None]).sum(0)
    ig = ((e - e0)[0] * total).sum(-1).cpu().numpy()
    return InputAttribution(int(target_id), baseline, float(lp[0]), float(base_lp[0]), gxi, ig, steps)
