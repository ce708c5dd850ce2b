"""Patching in seconds: attribution patching estimates every component's effect at once, real activation patching
checks the top ones.

A component is one head's output (its slice of o_proj's input, every position) or one layer's MLP output (every
position). Patching it means: run the corrupted prompt, but with that component's activation taken from the clean
run. The metric is the logit difference clean answer - corrupted answer at the last position (`interventions.contrast`),
read as the share of the clean run's lead that comes back: (patched - corrupted) / (clean - corrupted).

  estimate   attribution patching (Nanda 2023; Syed, Rager & Conmy 2023): the first-order Taylor term of that
             change, (clean_act - corrupted_act) . d metric / d act, the gradient taken on the corrupted run. One
             clean pass, one corrupted pass with one backward pass gives every head's and MLP's estimate.
  real       activation patching of the chosen components (one batch row each, at most PATCH_ROWS_PER_PASS a pass).

Every pass starts at the first token where the two questions differ (prefix.py): before it both runs are the same,
so a patch there changes nothing and the estimate's terms are 0; the shared part is run once, as a KV cache.

`patching_steps` is both as one long job (pipeline.core.long_jobs): the clean run, the corrupted run with its backward
pass, then real patching of the `top` components with the largest estimates (by size), a pass per chunk.
The estimate is linear: it is exact for a change the rest of the network answers linearly, and misses where the
patched activation moves a softmax or a norm far (a head that switches its attention): the real column says how far.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.attribution import prefix as px
from pipeline.attribution.interventions import PATCH_ROWS_PER_PASS, check_pair, contrast
from pipeline.core.common_prefix import common_prefix_len
from pipeline.core.errors import InputError
from pipeline.core.long_jobs import Progress, Steps, run_to_end
from pipeline.model.interface import LanguageModel

MAX_CHECKED = 48  # real patching of at most this many components: 4 passes of 12 rows


@dataclass
class Checked:
    layer: int
    head: int | None  # None: the layer's MLP
    estimate: float
    real: float


@dataclass
class ComponentPatching:
    clean_id: int
    corrupted_id: int
    clean_diff: float
    corrupted_diff: float
    heads: np.ndarray  # (L, H) estimated share restored by patching each head's output from the clean run
    mlp: np.ndarray  # (L,) the same for each layer's MLP output
    checked: list[Checked]  # real patching of the components with the largest estimates, largest first

    def agreement(self, top: int = 5) -> tuple[float, int]:
        """(Spearman rank correlation of estimate and real over the checked components, how many of the `top`
        largest estimates are among the `top` largest real effects)."""
        est = np.array([c.estimate for c in self.checked])
        real = np.array([c.real for c in self.checked])
        top = min(top, len(est))
        overlap = len(set(np.argsort(-est)[:top]) & set(np.argsort(-real)[:top]))
        return spearman(est, real), overlap


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        tied = x == v
        r[tied] = r[tied].mean()
    return r


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation: the Pearson correlation of the ranks (nan for fewer than 2 values or a
    constant column)."""
    if len(x) < 2:
        return float("nan")
    rx, ry = ranks(x) - (len(x) + 1) / 2, ranks(y) - (len(y) + 1) / 2
    den = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / den) if den > 0 else float("nan")


def _capture_hooks(lm: LanguageModel, into: dict, detach: bool) -> list:
    """Hooks that keep each layer's o_proj input ("z", i) and MLP output ("mlp", i) of the next pass."""
    handles = []
    for i, block in enumerate(lm.model.model.layers):
        def keep_z(_m, args, i=i):
            into["z", i] = args[0].detach() if detach else args[0]

        def keep_mlp(_m, _args, out, i=i):
            out = out[0] if isinstance(out, tuple) else out
            into["mlp", i] = out.detach() if detach else out
        handles.append(block.self_attn.o_proj.register_forward_pre_hook(keep_z))
        handles.append(block.mlp.register_forward_hook(keep_mlp))
    return handles


def _clean_run(lm: LanguageModel, ids: list[int], start: int = 0, prefix=None) -> tuple[np.ndarray, dict]:
    """The clean run's last logits (V,) and every layer's z and MLP output (1, T - start, ...) at positions start..T-1
    (`prefix`: the KV cache of ids[:start]; made here when None and start > 0)."""
    import torch

    if prefix is None and start:
        prefix = px.prefix_cache(lm, ids[:start])
    acts: dict = {}
    with lm.lock:
        handles = _capture_hooks(lm, acts, detach=True)
        try:
            logits = lm.forward(torch.tensor([ids[start:]], device=lm.device), cache=px.row_cache(prefix, 1),
                                use_cache=prefix is not None).logits[0, -1]
        finally:
            for h in handles:
                h.remove()
    return logits.float().cpu().numpy(), acts


def _corrupted_gradients(lm: LanguageModel, ids: list[int], start: int = 0, prefix=None):
    """One corrupted pass over positions start..T-1 (after `prefix`, the KV cache of ids[:start]) with gradients on:
    its last logits (V,) and every layer's z and MLP output there, still in the autograd graph (the backward pass is
    the caller's, once it knows the metric). Positions before `start` need no gradient: the clean and corrupted
    activations there are the same, so their terms of the estimate are 0."""
    import torch

    acts: dict = {}
    emb = lm.model.get_input_embeddings()
    with lm.lock, torch.enable_grad():
        handles = _capture_hooks(lm, acts, detach=False)
        try:
            x = emb(torch.tensor([ids[start:]], device=lm.device)).detach().requires_grad_(True)
            lm.count_pass()
            logits = lm.model(inputs_embeds=x, cache=px.row_cache(prefix, 1), use_cache=prefix is not None,
                              logits_to_keep=1).logits[0, -1].float()
        finally:
            for h in handles:
                h.remove()
        return logits, acts


def estimate_steps(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int], top: int = 12,
                   ) -> Steps[ComponentPatching]:
    """Attribution patching of every head and MLP, then real patching of the `top` largest estimates (0: none),
    as a long job. The input is checked now (InputError naming the field); the work runs a chunk per next()."""
    check_pair(clean_ids, corrupted_ids)
    if not 0 <= top <= MAX_CHECKED:
        raise InputError("top", f"must be between 0 and {MAX_CHECKED}, got {top}.")
    plan = _plan(lm, list(clean_ids), list(corrupted_ids), int(top))[3]
    return px.measured(lm, plan, _chunks(lm, list(clean_ids), list(corrupted_ids), int(top)))


def estimate_and_check(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int],
                       top: int = 12) -> ComponentPatching:
    """estimate_steps run whole, now."""
    return run_to_end(estimate_steps(lm, clean_ids, corrupted_ids, top))


def _plan(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int], top: int):
    """(s: where passes start, rows: the most a pass takes, each real pass's rows, the plan: each part's kind and
    work units, prefix.py)."""
    T = len(clean_ids)
    s = px.start_of(common_prefix_len(clean_ids, corrupted_ids), T)  # both runs agree before s (prefix.py)
    n, rows = T - s, px.rows_per_pass(lm, s, PATCH_ROWS_PER_PASS, T - s)
    sizes = [min(rows, top - k) for k in range(0, top, rows)]
    plan = ([("plain", px.pass_work(lm, 1, s, 0) + px.pass_work(lm, 1, n, s)),
             ("backward", (1 + px.BACKWARD_COST) * px.pass_work(lm, 1, n, s))]
            + [("patched", px.pass_work(lm, size, n, s)) for size in sizes])
    return s, rows, sizes, plan


def patching_plan(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int], top: int) -> list[px.Part]:
    """The job's parts, each (kind, work units): what its progress counts and the page's expected time reads."""
    return _plan(lm, list(clean_ids), list(corrupted_ids), int(top))[3]


def _chunks(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int], top: int) -> Steps[ComponentPatching]:
    import torch

    L, H, Dh = lm.dims.L, lm.dims.H, lm.dims.Dh
    s, rows, sizes, plan = _plan(lm, clean_ids, corrupted_ids, top)
    total = len(plan)
    prefix = px.prefix_cache(lm, clean_ids[:s])  # = corrupted_ids[:s]
    clean, clean_acts = _clean_run(lm, clean_ids, s, prefix)
    yield Progress(1, total, "the clean question run")
    logits, acts = _corrupted_gradients(lm, corrupted_ids, s, prefix)
    corrupted = logits.detach().cpu().numpy()
    a, b = contrast(clean, corrupted)
    d_clean, d_bad = float(clean[a] - clean[b]), float(corrupted[a] - corrupted[b])
    span = d_clean - d_bad if abs(d_clean - d_bad) > 1e-9 else 1e-9
    keys = [("z", i) for i in range(L)] + [("mlp", i) for i in range(L)]
    with lm.lock:
        grads = torch.autograd.grad(logits[a] - logits[b], [acts[k] for k in keys])
    heads, mlp = np.zeros((L, H)), np.zeros(L)
    for k, g in zip(keys, grads):
        delta = (clean_acts[k].float() - acts[k].detach().float()) * g.float()  # (1, T - s, width)
        if k[0] == "z":
            heads[k[1]] = delta[0].reshape(-1, H, Dh).sum((0, 2)).cpu().numpy() / span
        else:
            mlp[k[1]] = float(delta.sum()) / span
    del acts, grads
    yield Progress(2, total, "the corrupted question run, forward and backward")
    parts = [(i, h, heads[i, h]) for i in range(L) for h in range(H)] + [(i, None, mlp[i]) for i in range(L)]
    chosen = sorted(parts, key=lambda p: -abs(p[2]))[:top]
    checked: list[Checked] = []
    for k, size in enumerate(sizes):
        group = chosen[k * rows:k * rows + size]
        out = _patched_logits(lm, corrupted_ids, clean_acts, [(i, h) for i, h, _ in group], s, prefix)
        checked += [Checked(i, h, float(e), float((out[r, a] - out[r, b] - d_bad) / span))
                    for r, (i, h, e) in enumerate(group)]
        yield Progress(3 + k, total, f"{len(checked)} of {top} components patched for real")
    return ComponentPatching(a, b, d_clean, d_bad, heads, mlp, checked)


def _patched_logits(lm: LanguageModel, ids: list[int], clean_acts: dict, rows: list[tuple[int, int | None]],
                    start: int = 0, prefix=None):
    """One pass of len(rows) copies of `ids`, row r with component rows[r] (layer, head or None: the MLP) taken
    from the clean run at every position from `start` (clean_acts hold positions start..T-1; `prefix`: the corrupted
    run's KV cache of ids[:start], made here when None and start > 0): (rows, V) last logits."""
    import torch

    if prefix is None and start:
        prefix = px.prefix_cache(lm, ids[:start])

    Dh = lm.dims.Dh
    layers = lm.model.model.layers
    handles = []

    def patch_z(i):
        def hook(_m, args):
            z = args[0].clone()
            for r, (layer, head) in enumerate(rows):
                if layer == i and head is not None:
                    s = slice(head * Dh, (head + 1) * Dh)
                    z[r, :, s] = clean_acts["z", i][0, :, s].to(z.device, z.dtype)
            return (z,) + tuple(args[1:])
        return hook

    def patch_mlp(i):
        def hook(_m, _args, out):
            h = (out[0] if isinstance(out, tuple) else out).clone()
            for r, (layer, head) in enumerate(rows):
                if layer == i and head is None:
                    h[r] = clean_acts["mlp", i][0].to(h.device, h.dtype)
            return (h,) + tuple(out[1:]) if isinstance(out, tuple) else h
        return hook

    with lm.lock:
        try:
            for i in sorted({layer for layer, _ in rows}):
                handles.append(layers[i].self_attn.o_proj.register_forward_pre_hook(patch_z(i)))
                handles.append(layers[i].mlp.register_forward_hook(patch_mlp(i)))
            out = lm.forward(torch.tensor([ids[start:]] * len(rows), device=lm.device),
                             cache=px.row_cache(prefix, len(rows)), use_cache=prefix is not None).logits[:, -1]
        finally:
            for h in handles:
                h.remove()
    return out.float().cpu().numpy()
