"""Proof by intervention: change one part of the network and run the same ids again.

  ablate   a head (its slice of o_proj's input) or a layer's MLP output, at every position, set to zero
           or to its mean over the sequence; one pass over the step's ids -> the target's new probability
           and whether the top token changes.
  patch    activation patching (TransformerLens's `get_act_patch_resid_pre`): run a corrupted prompt of the
           same length and copy one layer x position of the clean run's residual stream into it; how much of
           the clean answer comes back, (patched - corrupted) / (clean - corrupted) of the logit difference
           clean answer - corrupted answer (1 = all of it). Batched passes per layer (one row per position, at
           most PATCH_ROWS_PER_PASS rows a pass), each from the first patched position on after a shared KV cache
           (prefix.py); positions before the first differing token restore exactly 0 and run no pass.
           `patch_residual_steps` is the same work as a long job of short chunks (pipeline.core.long_jobs): the two
           plain runs, each pass of each layer, the whole last stream, each yielding its progress (with its work).
Passes go through `lm.forward` (the lock, the pass counter); the hooks are registered under the lock.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from pipeline.core.common_prefix import common_prefix_len
from pipeline.core.errors import InputError
from pipeline.core.long_jobs import Progress, Steps, run_to_end
from pipeline.core.maths import softmax
from pipeline.model.interface import LanguageModel

MODES = ("zero", "mean")
# Positions patched per pass: each layer's rows (one per position) go in passes of at most this many, a chunk each
# of the long job. SmolLM2 fp32 on this shared 2-core machine: 34 rows in one pass took ~3 s (7 s at most under
# load); 12 rows about a second, which is as long as a question waits behind patching.
PATCH_ROWS_PER_PASS = 12


@contextmanager
def _hooked(lm: LanguageModel, module, hook, pre: bool = False):
    with lm.lock:
        handle = module.register_forward_pre_hook(hook) if pre else module.register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()


@dataclass
class Ablation:
    layer: int
    head: int | None  # None: the MLP
    mode: str
    target_id: int
    prob_before: float
    prob_after: float
    logit_before: float
    logit_after: float
    top_before: int
    top_after: int

    @property
    def answer_changes(self) -> bool:
        return self.top_before != self.top_after


def _last_logits(lm: LanguageModel, ids: list[int]) -> np.ndarray:
    import torch

    return lm.forward(torch.tensor([ids], device=lm.device), use_cache=False).logits[0, -1].float().cpu().numpy()


def ablate(lm: LanguageModel, ids: list[int], target_id: int, layer: int, head: int | None = None,
           mode: str = "zero", clean_logits: np.ndarray | None = None) -> Ablation:
    """Ablate head `head` of `layer` (None: the layer's MLP) and read the next-token scores after `ids`."""
    L, H, Dh = lm.dims.L, lm.dims.H, lm.dims.Dh
    if mode not in MODES:
        raise InputError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}.")
    if not 0 <= layer < L:
        raise InputError("layer", f"must be between 0 and {L - 1}, got {layer}.")
    if head is not None and not 0 <= head < H:
        raise InputError("head", f"must be between 0 and {H - 1}, got {head}.")
    if not 0 <= target_id < lm.dims.V:
        raise InputError("target", f"must be a token id between 0 and {lm.dims.V - 1:,}, got {target_id}.")
    before = clean_logits if clean_logits is not None else _last_logits(lm, ids)
    block = lm.model.model.layers[layer]

    def fill(x):
        return x.zero_() if mode == "zero" else x.copy_(x.mean(dim=-2, keepdim=True).expand_as(x))

    if head is None:
        def hook(_m, _args, out):
            out = out[0] if isinstance(out, tuple) else out
            return fill(out.clone())
        ctx = _hooked(lm, block.mlp, hook)
    else:
        def hook(_m, args):
            z = args[0].clone()
            fill(z[..., head * Dh:(head + 1) * Dh])
            return (z,) + tuple(args[1:])
        ctx = _hooked(lm, block.self_attn.o_proj, hook, pre=True)
    with ctx:
        after = _last_logits(lm, ids)
    pb, pa = softmax(before.astype(np.float64)), softmax(after.astype(np.float64))
    return Ablation(layer, head, mode, int(target_id), float(pb[target_id]), float(pa[target_id]),
                    float(before[target_id]), float(after[target_id]), int(before.argmax()), int(after.argmax()))


@dataclass
class Patching:
    clean_id: int  # the clean run's top token
    corrupted_id: int  # the corrupted run's top token (or the clean one's runner-up there, when they agree)
    clean_diff: float
    corrupted_diff: float
    restored: np.ndarray  # (L+1, P): layer 0 = the embeddings, layer i = the stream before block i, L = after the last
    positions: list[int]
    whole_last_logits: np.ndarray  # (V,) the corrupted run with the whole stream after the last block patched


def _stream_module(lm: LanguageModel, layer: int):
    """The module whose output is the residual stream before block `layer` (layer L: after the last block)."""
    body = lm.model.model
    return body.embed_tokens if layer == 0 else body.layers[layer - 1]


def _forward_patched(lm: LanguageModel, ids: list[int], layer: int, values, rows: list[list[int]], start: int = 0,
                     prefix=None):
    """One pass, batch row b with the stream at positions rows[b] replaced by values[positions] (T, D). From
    `start` on (rows' positions >= start): the pass runs ids[start:] after `prefix`, the KV cache of ids[:start]."""
    import torch

    from pipeline.attribution.prefix import row_cache

    def hook(_m, _args, out):
        h = out[0] if isinstance(out, tuple) else out
        h = h.clone()
        for b, positions in enumerate(rows):
            at = [p - start for p in positions]
            h[b, at] = values[positions].to(h.device, h.dtype)  # captured on the CPU, h on the model's device
        return (h,) + tuple(out[1:]) if isinstance(out, tuple) else h

    batch = torch.tensor([ids[start:]] * len(rows), device=lm.device)
    cache = row_cache(prefix, len(rows))
    with _hooked(lm, _stream_module(lm, layer), hook):
        return lm.forward(batch, cache=cache, use_cache=cache is not None).logits[:, -1].float().cpu().numpy()


def patch_residual(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int],
                   positions: list[int] | None = None, layers: list[int] | None = None) -> Patching:
    """Patch each (layer, position) of the stream from the clean run into the corrupted one (`layers`: the rows
    computed, default all L + 1; the others stay NaN)."""
    return run_to_end(patch_residual_steps(lm, clean_ids, corrupted_ids, positions, layers))


def check_pair(clean_ids: list[int], corrupted_ids: list[int]) -> None:
    """Patching copies position by position: the two prompts must have as many tokens."""
    if len(clean_ids) != len(corrupted_ids):
        raise InputError("corrupted", f"must have as many tokens as the clean prompt ({len(clean_ids)}), "
                                      f"has {len(corrupted_ids)}: change a word for a word of the same length.")


def contrast(clean: np.ndarray, corrupted: np.ndarray) -> tuple[int, int]:
    """The two answers patching measures between, from the two runs' last logits: (the clean run's top token, the
    corrupted run's top token, or the clean run's runner-up when both runs agree)."""
    a, b = int(clean.argmax()), int(corrupted.argmax())
    return (a, int(np.argsort(clean)[-2])) if b == a else (a, b)


def patch_residual_steps(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int],
                         positions: list[int] | None = None, layers: list[int] | None = None) -> Steps[Patching]:
    """patch_residual as a long job: the input is checked now (InputError naming the field), the work runs a
    chunk per next(): the clean and the corrupted runs, one per layer patched, the whole last stream."""
    check_pair(clean_ids, corrupted_ids)
    T, L = len(clean_ids), lm.dims.L
    positions = list(range(T)) if positions is None else sorted(set(positions))
    if not positions or not all(0 <= p < T for p in positions):
        raise InputError("positions", f"must be positions between 0 and {T - 1}.")
    layers = list(range(L + 1)) if layers is None else list(layers)
    if not all(0 <= i <= L for i in layers):
        raise InputError("layers", f"must be layers between 0 and {L}.")
    from pipeline.attribution.prefix import measured

    plan = _map_plan(lm, clean_ids, corrupted_ids, positions, layers)[4]
    return measured(lm, plan, _patch_chunks(lm, list(clean_ids), list(corrupted_ids), positions, layers))


def _map_plan(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int], positions: list[int],
              layers: list[int]):
    """(d: the first differing token, s: where passes start, the positions run, their groups (one pass each per
    layer), the plan: each part's kind and work units, prefix.py)."""
    from pipeline.attribution import prefix as px

    T = len(clean_ids)
    d = common_prefix_len(clean_ids, corrupted_ids)  # the first differing token (the prompts are equally long)
    run = [p for p in positions if p >= d]  # before d both streams are the same: a patch there restores 0
    s = px.start_of(d, T, positions[0])  # patched passes run positions s..T-1 (prefix.py)
    n = T - s
    parts = -(-len(run) // px.rows_per_pass(lm, s, PATCH_ROWS_PER_PASS, n))  # passes per layer, of nearly equal rows
    groups = [run[i::parts] for i in range(parts)]  # run[i::parts]: every parts-th, evenly spread
    plan = ([("plain", px.pass_work(lm, 1, T, 0)), ("plain", px.pass_work(lm, 1, s, 0) + px.pass_work(lm, 1, n, s))]
            + [("patched", px.pass_work(lm, len(g), n, s)) for _ in layers for g in groups]
            + [("patched", px.pass_work(lm, 1, n, s))])
    return d, s, run, groups, plan


def map_plan(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int], positions: list[int]) -> list:
    """The full map's parts over `positions`, every layer, each (kind, work units): what the page's expected time
    reads."""
    return _map_plan(lm, list(clean_ids), list(corrupted_ids), sorted(set(positions)), list(range(lm.dims.L + 1)))[4]


def _patch_chunks(lm: LanguageModel, clean_ids: list[int], corrupted_ids: list[int], positions: list[int],
                  layers: list[int]) -> Steps[Patching]:
    import torch

    from pipeline.attribution import prefix as px
    from pipeline.model.capture import block_names, capture

    T, L = len(clean_ids), lm.dims.L
    d, s, run, groups, plan = _map_plan(lm, clean_ids, corrupted_ids, positions, layers)
    total, done = len(plan), 2
    with capture(lm, ["embeddings"] + block_names(L, "hidden_states")) as rec:
        clean = lm.forward(torch.tensor([clean_ids], device=lm.device), use_cache=False).logits[0, -1].float().cpu()
    streams = [rec["embeddings"][0][0]] + [rec[f"blocks.{i}.hidden_states"][0][0] for i in range(L)]
    yield Progress(1, total, "the clean question run")
    prefix = px.prefix_cache(lm, corrupted_ids[:s])
    corrupted = _forward_patched(lm, corrupted_ids, 0, streams[0], [[]], s, prefix)[0]  # nothing patched
    yield Progress(2, total, "the corrupted question run")
    clean = clean.numpy()
    a, b = contrast(clean, corrupted)
    diff = lambda lg: lg[..., a] - lg[..., b]  # noqa: E731
    d_clean, d_bad = float(diff(clean)), float(diff(corrupted))
    span = d_clean - d_bad if abs(d_clean - d_bad) > 1e-9 else 1e-9
    restored = np.full((L + 1, len(positions)), np.nan)
    column = {p: j for j, p in enumerate(positions)}
    restored[np.ix_(layers, [column[p] for p in positions if p < d])] = 0.0
    for layer in layers:
        where = f"the stream before block {layer}" if layer < L else "the stream after the last block"
        for k, group in enumerate(groups):
            out = _forward_patched(lm, corrupted_ids, layer, streams[layer], [[p] for p in group], s, prefix)
            restored[layer, [column[p] for p in group]] = (diff(out) - d_bad) / span
            done += 1
            yield Progress(done, total, f"{where} patched" + (f", pass {k + 1} of {len(groups)}" if len(groups) > 1
                                                              else ""))
    whole = _forward_patched(lm, corrupted_ids, L, streams[L], [list(range(s, T))], s, prefix)[0]
    return Patching(a, b, d_clean, d_bad, restored, positions, whole)
