"""Input attribution on the embeddings for one token's log-probability (as Captum's InputXGradient and
IntegratedGradients do; Captum itself is not a dependency).

  f(E)       = log softmax(model(inputs_embeds = E))[last position, target]
  grad x in  = sum_D  E * df/dE                                      (one backward pass)
  IG         = sum_D  (E - E0) * sum_k w_k df/dE(E0 + a_k (E - E0))  (nodes a_k in [0, 1], weights w_k summing to 1)

Completeness: the IG attributions sum to f(E) - f(E0), up to the quadrature's error
(`InputAttribution.completeness_gap` says how far off a run is).

The rule, adaptive: [0, 1] is cut into panels of NODES nodes each (Gauss-Legendre on each), `steps` nodes in all to
start with. On each panel [lo, hi] the same completeness holds and can be checked: its share of the integral must
equal f(lo + ...) at hi minus at lo, both known from a plain evaluation (one more batch row per panel end). While
the panels' gaps add up to more than GAP_TARGET of |f(E) - f(E0)| (an upper bound of the whole gap), the panels
with the largest gaps are halved, until MAX_STEPS nodes are spent. A smooth path stays at `steps` nodes; a path
with a sharp bend gets its nodes where it bends (SmolLM2's default question: 30 nodes on one panel missed by 5.7 %).

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

MAX_STEPS = 128  # the most nodes one call starts with
MAX_NODES = 256  # the most gradient evaluations the adaptive rule spends in all (panel ends not counted)
NODES = 6  # Gauss-Legendre nodes per panel
GAP_TARGET = 0.04  # halve panels until their gaps add up to under this share of |f(E) - f(E0)|
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
    steps: int  # gradient evaluations spent (halved panels' nodes included)
    panels: int = 1  # the panels the rule ended with

    @property
    def completeness_gap(self) -> float:
        """|sum IG - (f(E) - f(E0))| / |f(E) - f(E0)|: 0 for an exact integral."""
        want = self.log_prob - self.baseline_log_prob
        return abs(float(self.integrated.sum()) - want) / max(abs(want), 1e-12)


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
    bounds = PANELS if baseline == "zero" else tuple(np.linspace(0.0, 1.0, max(1, round(steps / NODES)) + 1))
    per_panel = max(1, steps // (len(bounds) - 1))
    f = {0.0: float(base_lp[0]), 1.0: float(lp[0])}
    panels = _panels(lm, e, e0, target_id, list(zip(bounds, bounds[1:])), per_panel, f)
    spent = len(panels) * per_panel
    want = abs(f[1.0] - f[0.0])
    while sum(p[2] for p in panels.values()) > GAP_TARGET * max(want, 1e-12):
        worst = sorted(panels, key=lambda k: -panels[k][2])
        split, left = [], sum(p[2] for p in panels.values())
        for lo, hi in worst:  # the worst panels, until what is left is under half the target
            if left <= GAP_TARGET * want / 2 or spent + 2 * (len(split) + 1) * per_panel > MAX_NODES:
                break
            split.append((lo, hi))
            left -= panels[lo, hi][2]
        if not split:
            break
        for k in split:
            del panels[k]
        halves = [h for lo, hi in split for h in ((lo, (lo + hi) / 2), ((lo + hi) / 2, hi))]
        panels.update(_panels(lm, e, e0, target_id, halves, per_panel, f))
        spent += len(halves) * per_panel
    total = sum(p[0] for p in panels.values())
    ig = ((e - e0)[0] * total).sum(-1).cpu().numpy()
    return InputAttribution(int(target_id), baseline, float(lp[0]), float(base_lp[0]), gxi, ig, spent, len(panels))


def _panels(lm: LanguageModel, e, e0, target_id: int, spans: list[tuple[float, float]], nodes: int, f: dict) -> dict:
    """{(lo, hi): (the panel's integral of the gradient (T, D), its quadrature of df along the path, its gap
    |that - (f(hi) - f(lo))|)} for each span, Gauss-Legendre with `nodes` nodes; `f` ({alpha: f}) gains the
    panel ends it lacked (evaluated in the same batches as the nodes)."""
    import torch

    x, w = np.polynomial.legendre.leggauss(nodes)
    ends = sorted({a for span in spans for a in span} - set(f))
    alphas = [lo + (x + 1) / 2 * (hi - lo) for lo, hi in spans]
    rows = np.concatenate(alphas + [np.array(ends)])
    weights = np.concatenate([w / 2 * (hi - lo) for lo, hi in spans] + [np.zeros(len(ends))])
    panel_of = np.concatenate([np.full(nodes, k) for k in range(len(spans))] + [np.full(len(ends), -1)])
    integrals = torch.zeros((len(spans),) + tuple(e.shape[1:]), dtype=e.dtype, device=e.device)
    lps = []
    per = max(1, BATCH_ROWS // e.shape[1])
    for start in range(0, len(rows), per):
        a = torch.tensor(rows[start:start + per], dtype=e.dtype, device=e.device)[:, None, None]
        lp, g = _log_prob_and_grad(lm, (e0 + a * (e - e0)).to(lm.model.get_input_embeddings().weight.dtype), target_id)
        for r in range(len(a)):  # each node's weighted gradient into its panel's integral (the panel ends: none)
            if panel_of[start + r] >= 0:
                integrals[panel_of[start + r]] += float(weights[start + r]) * g[r].float()
        lps.append(lp.float().cpu().numpy())
    lp = np.concatenate(lps)
    f.update({a: float(v) for a, v in zip(ends, lp[len(rows) - len(ends):])})
    out = {}
    for k, (lo, hi) in enumerate(spans):
        integral = integrals[k]
        quad = float(((e - e0)[0] * integral).sum())
        out[lo, hi] = (integral, quad, abs(quad - (f[hi] - f[lo])))
    return out
