"""Why a head attends where it does: one head's pre-softmax score from a query position to each key, split into
(query-side part x key-side part) terms.

The stream entering block `layer` at position t is a sum of parts: the embedding plus every earlier layer's
attention and MLP output (record.py). The head's query is

    q(p) = RoPE_p( n_q * g_q * W_q^h ( g * r(p) * x(p) ) )        (Gemma: n_q, g_q its q_norm; Llama: 1)

with g, r(p) the block's input RMSNorm scale and 1 / rms, and n_q = 1 / rms of the head's query before q_norm.
Freeze r and n_q at this run's values and q is linear in x, so q(p) = sum_c q_c(p), one term per part c; the
key likewise (k_norm, the key-value head the query head reads). The score the softmax sees is

    score(p, j) = scaling * q(p) . k(j) = sum_{c, c'} scaling * q_c(p) . k_c'(j)        (exact, C x C terms)

scaling is the module's own (Llama: Dh^-1/2; Gemma: query_pre_attn_scalar^-1/2). A model that soft-caps its
scores (cap * tanh(s / cap)) gets each key's terms times capped / uncapped, frozen the same way. A bias (if the
projections have one) is one more part. Each term alone is a linear reading: without that part the norms would
rescale the rest.

`score` here is the model's own: the captured q and k (after QK-norm) turned by the model's own RoPE tables,
times scaling; the terms are recomputed from the parts in float64 with the layer's RoPE base (dims.rope_base_of).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.attribution.record import StepRecord, is_gemma
from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel
from pipeline.model.rope import cos_sin, rotate, signed_sin


@dataclass
class KeyTerms:
    position: int
    score: float  # the model's own pre-softmax score, scaled (and soft-capped, if the model caps)
    probability: float  # softmax of the scores over the keys this query may see
    terms: np.ndarray  # (C, C) [query part, key part]

    @property
    def terms_sum(self) -> float:
        return float(self.terms.sum())


@dataclass
class QKAttribution:
    layer: int
    head: int
    query_position: int
    parts: list[str]  # (C,) the names of the stream's parts, on both sides
    keys: list[KeyTerms]  # the top keys, highest score first
    scores: np.ndarray  # (T,) every key's score; NaN where the query may not look (later, or outside the window)

    def to_json(self) -> dict:
        return {"layer": self.layer, "head": self.head, "query_position": self.query_position,
                "parts": self.parts,
                "keys": [{"position": k.position, "score": k.score, "probability": k.probability,
                          "terms": [{"query_part": self.parts[a], "key_part": self.parts[b],
                                     "value": float(k.terms[a, b])}
                                    for a in range(len(self.parts)) for b in range(len(self.parts))],
                          "terms_sum": k.terms_sum} for k in self.keys]}


def part_names(layer: int, bias: bool = False) -> list[str]:
    """The parts of the stream entering block `layer`: embedding, layer 0 attention, layer 0 MLP, ..."""
    names = ["embedding"] + [f"layer {i} {kind}" for i in range(layer) for kind in ("attention", "MLP")]
    return names + (["bias"] if bias else [])


def check_attends(lm: LanguageModel, layer: int, head: int, query: int | None, T: int) -> int:
    """The query position (default: the last), or an InputError naming the field."""
    L, H = lm.dims.L, lm.dims.H
    if not (isinstance(layer, (int, np.integer)) and 0 <= layer < L):
        raise InputError("attends", f"layer must be between 0 and {L - 1}, got {layer!r}.")
    if not (isinstance(head, (int, np.integer)) and 0 <= head < H):
        raise InputError("attends", f"head must be between 0 and {H - 1}, got {head!r}.")
    query = T - 1 if query is None else query
    if not (isinstance(query, (int, np.integer)) and 0 <= query < T):
        raise InputError("query", f"must be a position between 0 and {T - 1}, got {query!r}.")
    return int(query)


def parse_attends(text: str) -> tuple[int, int]:
    """'LAYER.HEAD' -> (layer, head), or an InputError saying the form."""
    layer, dot, head = str(text).strip().partition(".")
    if not dot or not all(n.isascii() and n.isdigit() and len(n) <= 6 for n in (layer, head)):
        raise InputError("attends", f"must be LAYER.HEAD, two whole numbers such as 3.1, got {text!r}.")
    return int(layer), int(head)


def visible_keys(lm: LanguageModel, layer: int, query: int) -> np.ndarray:
    """The key positions the query at `query` sees in `layer`: itself and earlier ones, within a sliding window."""
    window = lm.dims.window(layer)
    start = 0 if window is None else max(0, query - window + 1)
    return np.arange(start, query + 1)


def _eps(norm) -> float:
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


def _check_rope(lm: LanguageModel) -> None:
    rope = getattr(lm.config, "rope_parameters", None) or {}
    kinds = [v.get("rope_type", "default") for v in rope.values() if isinstance(v, dict)] or \
        [rope.get("rope_type", "default")]
    if any(k != "default" for k in kinds):
        raise InputError("model", "the QK split knows only plain RoPE (rope_type 'default'); this model scales it.")


def _model_scores(lm: LanguageModel, ids: list[int], layer: int, head: int, query: int) -> np.ndarray:
    """(T,) the model's own scores from `query` to every position (unmasked): one pass capturing this layer's
    q and k after QK-norm and its RoPE tables, turned and multiplied here."""
    import torch

    from pipeline.model.capture import capture, layout_for

    Dh = lm.dims.Dh
    rope = layout_for(lm.model).layer_rope(lm.model, layer)
    names = [f"blocks.{layer}.q", f"blocks.{layer}.k", f"{rope}.cos", f"{rope}.sin"]
    with lm.lock, capture(lm, names) as rec:
        lm.forward(torch.tensor([ids], device=lm.device), use_cache=False)
    q, k, cos, sin = (rec[n][0][0].double().numpy() for n in names)
    kv = lm.dims.kv_head(head)
    sin = signed_sin(sin)
    q_rot = rotate(q[query:query + 1, head * Dh:(head + 1) * Dh], cos[query:query + 1], sin[query:query + 1])
    k_rot = rotate(k[:, kv * Dh:(kv + 1) * Dh], cos, sin)
    attn = lm.model.model.layers[layer].self_attn
    raw = float(attn.scaling) * (k_rot @ q_rot[0])
    return _soft_cap(lm, raw)


def _soft_cap(lm: LanguageModel, raw: np.ndarray) -> np.ndarray:
    cap = getattr(lm.config, "attn_logit_softcapping", None)
    return raw if not cap else cap * np.tanh(raw / cap)


def _side_parts(lm: LanguageModel, rec: StepRecord, layer: int, positions: np.ndarray, side: str,
                head: int) -> np.ndarray:
    """(C, P, Dh) each part's share of the head's query (side 'q') or key (side 'k') at `positions`, after the
    frozen norms and RoPE; the parts sum to the model's own q or k."""
    from pipeline.model.capture import layout_for

    block = lm.model.model.layers[layer]
    attn = block.self_attn
    layout = layout_for(lm.model)
    Dh = lm.dims.Dh
    row = head if side == "q" else lm.dims.kv_head(head)
    proj = attn.q_proj if side == "q" else attn.k_proj
    w = proj.weight.detach().double().cpu().numpy()[row * Dh:(row + 1) * Dh]  # (Dh, D)
    x = rec.resid[layer, positions].astype(np.float64)  # (P, D) the block's input, to freeze the norm
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1) + _eps(block.input_layernorm))  # (P,)
    g = layout.norm_scale(block.input_layernorm).detach().double().cpu().numpy()  # (D,)
    parts = [rec.resid[0, positions]] + [arr[i, positions] for i in range(layer) for arr in (rec.attn, rec.mlp)]
    X = np.stack(parts).astype(np.float64) * (r[:, None] * g)[None]  # (C, P, D)
    out = X @ w.T  # (C, P, Dh)
    bias = proj.bias
    if attn.q_proj.bias is not None or attn.k_proj.bias is not None:
        b = np.zeros(Dh) if bias is None else bias.detach().double().cpu().numpy()[row * Dh:(row + 1) * Dh]
        out = np.concatenate([out, np.broadcast_to(b, (1, len(positions), Dh))])
    if is_gemma(lm):  # q_norm / k_norm on the head's whole vector, its 1/rms frozen
        norm = attn.q_norm if side == "q" else attn.k_norm
        whole = out.sum(0)  # (P, Dh)
        n = 1.0 / np.sqrt(np.mean(whole * whole, axis=-1) + _eps(norm))
        out = out * (n[:, None] * layout.norm_scale(norm).detach().double().cpu().numpy())[None]
    cos, sin = cos_sin(positions, Dh, lm.dims.rope_base_of(layer))
    return rotate(out, cos, signed_sin(sin))


def qk_attribution(lm: LanguageModel, rec: StepRecord, layer: int, head: int, query: int | None = None,
                   top: int = 5) -> QKAttribution:
    """Head `head` of layer `layer` at query position `query` (default: the last): every visible key's score, and
    the (query part x key part) terms of the `top` highest."""
    T = len(rec.ids)
    query = check_attends(lm, layer, head, query, T)
    _check_rope(lm)
    keys = visible_keys(lm, layer, query)
    scores = np.full(T, np.nan)
    scores[keys] = _model_scores(lm, rec.ids, layer, head, query)[keys]
    probs = np.exp(scores[keys] - scores[keys].max())
    probs /= probs.sum()
    order = keys[np.argsort(-scores[keys], kind="stable")][:max(1, top)]
    q = _side_parts(lm, rec, layer, np.array([query]), "q", head)[:, 0]  # (C, Dh)
    k = _side_parts(lm, rec, layer, order, "k", head)  # (C, K, Dh)
    scaling = float(lm.model.model.layers[layer].self_attn.scaling)
    terms = scaling * np.einsum("ad,bkd->kab", q, k)  # (K, C, C)
    raw = terms.sum((1, 2))
    capped = _soft_cap(lm, raw)
    terms = terms * np.where(raw != 0, capped / np.where(raw != 0, raw, 1), 1.0)[:, None, None]
    prob_of = dict(zip(keys.tolist(), probs.tolist()))
    bias = q.shape[0] > 1 + 2 * layer
    return QKAttribution(int(layer), int(head), query, part_names(layer, bias),
                         [KeyTerms(int(j), float(scores[j]), prob_of[int(j)], terms[n])
                          for n, j in enumerate(order)], scores)


def grouped(parts: list[str], terms: np.ndarray, n: int = 6) -> tuple[list[str], list[str], np.ndarray]:
    """A small matrix of one key's terms: the n query parts and n key parts with the largest terms (by absolute
    row and column sums of |term|), the rest folded into 'other parts'; it still sums to the score."""
    def pick(weight):
        keep = sorted(np.argsort(-weight, kind="stable")[:n].tolist())
        rest = [i for i in range(len(parts)) if i not in keep]
        return keep, rest

    rows, row_rest = pick(np.abs(terms).sum(1))
    cols, col_rest = pick(np.abs(terms).sum(0))
    groups_r = [[i] for i in rows] + ([row_rest] if row_rest else [])
    groups_c = [[j] for j in cols] + ([col_rest] if col_rest else [])
    m = np.array([[terms[np.ix_(r, c)].sum() for c in groups_c] for r in groups_r])
    name = lambda g: parts[g[0]] if len(g) == 1 else f"other parts ({len(g)})"  # noqa: E731
    return [name(g) for g in groups_r], [name(g) for g in groups_c], m


def largest_terms(parts: list[str], terms: np.ndarray, k: int = 3) -> list[tuple[str, str, float]]:
    """The k terms of largest size: (query part, key part, value)."""
    flat = np.argsort(-np.abs(terms), axis=None, kind="stable")[:k]
    return [(parts[a], parts[b], float(terms[a, b])) for a, b in zip(*np.unravel_index(flat, terms.shape))]


def in_words(parts: list[str], key: KeyTerms, k: int = 3) -> str:
    """One sentence on one key's largest terms, e.g. "The query's layer 2 MLP meeting the key's embedding adds +1.20
    of the score +3.05; ..."."""
    said = [f"the query's {a} meeting the key's {b} {'adds' if v >= 0 else 'takes'} {abs(v):.2f}"
            for a, b, v in largest_terms(parts, key.terms, k)]
    return f"Score {key.score:+.2f} at position {key.position}: " + "; ".join(said) + "."
