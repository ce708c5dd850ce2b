"""The contribution graph (Ferrando & Voita 2024, "Information flow routes"; llm-transparency-tool's
`routes/contributions.py`): which heads and source tokens the prediction's information came through.

Each block updates a position's stream twice: mid = pre + sum_{h, s} part[h, s] (head h reading source s:
its attention weight times source s's value through its slice of o_proj), then post = mid + mlp. A part's
share of the whole is its L1 proximity, max(|whole|_1 - |whole - part|_1, eps), divided by the sum over the
parts and the residual (pre, or mid): per position and layer the shares sum to 1. Routes are the edges whose
share passes a threshold, traced back from the predicted token's last stream; to stay bounded on long prompts
each layer keeps only its `max_nodes` strongest positions (strongest sources first).

Nodes: ("x", i, t) the stream before block i (i = L: after the last block), ("m", i, t) after its attention.
Edges: head (x i s -> m i t, per head h), residual (x i t -> m i t, and m i t -> x i+1 t), mlp (m i t -> x i+1 t).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.attribution.record import StepRecord, weights
from pipeline.model.interface import LanguageModel

EPS = 1e-5  # as llm-transparency-tool


def shares(parts: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """(n, D) parts, (D,) whole -> (n,) each part's L1-proximity share; they sum to 1."""
    parts, whole = parts.astype(np.float64), whole.astype(np.float64)  # float32 sums of |.| lose 1e-4 here
    proximity = np.maximum(np.abs(whole).sum() - np.abs(whole[None] - parts).sum(-1), EPS)
    return proximity / proximity.sum()


def source_parts(rec: StepRecord, lm: LanguageModel, layer: int, t: int) -> np.ndarray:
    """(T, H, D) what head h carries from source s into position t's stream at `layer` (zero past t).
    Their sum over s and h is attn[layer, t] (exact up to float rounding)."""
    _, _, _, w_o, post = weights(lm)
    H, Hkv, Dh = lm.dims.H, lm.dims.Hkv, lm.dims.Dh
    T = t + 1
    v = rec.v[layer, :T].reshape(T, Hkv, Dh)[:, np.arange(H) // (H // Hkv)]  # (T, H, Dh) each head's kv head
    w = w_o[layer].numpy().reshape(-1, H, Dh)  # (D, H, Dh)
    vo = np.einsum("shk,dhk->shd", v, w)  # (T, H, D) each source's value through each head's o_proj slice
    a = rec.pattern[layer, :, t, :T].astype(np.float32).T  # (T, H)
    out = a[:, :, None] * vo
    if post is not None:
        out = out * (rec.post_scale[layer, t] * post[layer].numpy())
    return out


@dataclass
class LayerShares:
    """One position's shares at one layer: heads (T, H) and the residual sum to 1; mlp + mlp_residual = 1."""
    heads: np.ndarray
    residual: float
    mlp: float
    mlp_residual: float


def layer_shares(rec: StepRecord, lm: LanguageModel, layer: int, t: int) -> LayerShares:
    parts = source_parts(rec, lm, layer, t)
    T, H, D = parts.shape
    pre, mid = rec.resid[layer, t], rec.resid[layer, t] + rec.attn[layer, t]
    s = shares(np.concatenate([parts.reshape(T * H, D), pre[None]]), mid)
    m = shares(np.stack([rec.mlp[layer, t], mid]), rec.resid[layer + 1, t])
    return LayerShares(s[:-1].reshape(T, H), float(s[-1]), float(m[0]), float(m[1]))


@dataclass
class Graph:
    threshold: float
    edges: list[dict] = field(default_factory=list)  # {"kind", "layer", "source", "target", "head", "share"}
    nodes: set = field(default_factory=set)  # ("x" | "m", layer, position)
    capped: bool = False  # some layer had more positions above the threshold than max_nodes

    def to_json(self) -> list[dict]:
        return self.edges


def contribution_graph(rec: StepRecord, lm: LanguageModel, threshold: float = 0.04, max_nodes: int = 12) -> Graph:
    """The routes into the last position's final stream whose share exceeds `threshold`, layer by layer from
    the top; at most `max_nodes` positions per layer (by their strongest incoming share)."""
    L = lm.dims.L
    T = len(rec.ids)
    g = Graph(threshold)
    active = {T - 1: 1.0}  # positions of x(i + 1) reached, with their strongest route's share
    g.nodes.add(("x", L, T - 1))
    for i in range(L - 1, -1, -1):
        below: dict[int, float] = {}
        for t in active:
            sh = layer_shares(rec, lm, i, t)
            reach_mid = False
            for kind, share in (("mlp", sh.mlp), ("residual", sh.mlp_residual)):
                if share > threshold:
                    g.edges.append(dict(kind=kind, layer=i, source=t, target=t, head=None, share=share,
                                        stage="mlp"))
                    reach_mid = True
            if not reach_mid:
                continue
            g.nodes.add(("m", i, t))
            if sh.residual > threshold:
                g.edges.append(dict(kind="residual", layer=i, source=t, target=t, head=None, share=sh.residual,
                                    stage="attention"))
                below[t] = max(below.get(t, 0.0), sh.residual)
            for s, h in zip(*np.nonzero(sh.heads > threshold)):
                share = float(sh.heads[s, h])
                g.edges.append(dict(kind="head", layer=i, source=int(s), target=t, head=int(h), share=share,
                                    stage="attention"))
                below[int(s)] = max(below.get(int(s), 0.0), share)
        if len(below) > max_nodes:
            g.capped = True
            keep = set(sorted(below, key=below.get, reverse=True)[:max_nodes])
            g.edges = [e for e in g.edges if not (e["layer"] == i and e["stage"] == "attention"
                                                  and e["source"] not in keep)]
            below = {s: below[s] for s in keep}
        g.nodes.update(("x", i, s) for s in below)
        active = below
        if not active:
            break
    return g
