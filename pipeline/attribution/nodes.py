"""The contribution graph's nodes, one at a time: a head, a layer's MLP, or an input token; what each writes
towards the prediction, its share, and what switching it off does.

  graph_nodes   the heads, MLPs and tokens the graph's routes pass through, strongest route first
  node_vector   what the node writes into the last position's stream (a token: its embedding row there)
  ablate_node   a head or an MLP through interventions.ablate; a token: its embedding zeroed (or set to the
                mean over the positions) in the stream before block 0, one pass (interventions' patched pass)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.attribution import interventions as iv
from pipeline.attribution.dla import LogitAttribution, head_outputs
from pipeline.attribution.graph import Graph
from pipeline.attribution.record import StepRecord
from pipeline.core.errors import InputError
from pipeline.core.maths import softmax
from pipeline.model.interface import LanguageModel

KINDS = ("head", "mlp", "token")


@dataclass(frozen=True)
class Node:
    kind: str  # one of KINDS
    layer: int  # heads and MLPs; a token: 0
    head: int | None  # heads only
    position: int  # a token's position; a head: the position its strongest route writes to; an MLP: that too
    source: int  # a head: the position its strongest route reads from; otherwise = position
    share: float  # the strongest route's share through this node


def graph_nodes(g: Graph) -> list[Node]:
    """Every head, MLP and input token on the graph's routes, each once (its strongest route), strongest first."""
    best: dict[tuple, Node] = {}

    def keep(key, node):
        if key not in best or node.share > best[key].share:
            best[key] = node

    for e in g.edges:
        if e["kind"] == "head":
            keep(("head", e["layer"], e["head"]), Node("head", e["layer"], e["head"], e["target"], e["source"],
                                                        e["share"]))
        elif e["kind"] == "mlp":
            keep(("mlp", e["layer"]), Node("mlp", e["layer"], None, e["target"], e["target"], e["share"]))
        if e["layer"] == 0 and e["stage"] == "attention":  # a route out of the embeddings
            keep(("token", e["source"]), Node("token", 0, None, e["source"], e["source"], e["share"]))
    return sorted(best.values(), key=lambda n: -n.share)


def node_vector(rec: StepRecord, lm: LanguageModel, node: Node) -> np.ndarray:
    """(D,) what the node writes into the last position's stream; a token: its embedding row at its own position
    (what the embedding alone would say if it were read out directly)."""
    if node.kind == "head":
        return head_outputs(rec, lm, node.layer)[node.head]
    if node.kind == "mlp":
        return rec.mlp[node.layer, -1]
    return rec.resid[0, node.position]


def direct_part(a: LogitAttribution, node: Node, last: int) -> float | None:
    """The node's own part of the explained score (direct logit attribution), or None for a token away from the
    last position (its effect only travels through the layers)."""
    if node.kind == "head":
        return float(a.heads[node.layer, node.head])
    if node.kind == "mlp":
        return float(a.mlp[node.layer])
    return float(a.embedding) if node.position == last else None


def ablate_node(lm: LanguageModel, ids: list[int], target_id: int, node: Node, mode: str = "zero",
                clean_logits: np.ndarray | None = None) -> iv.Ablation:
    """Switch the node off and read the next-token scores again. For a token the Ablation's layer is -1 (the
    embedding, before block 0) and its head None."""
    if node.kind != "token":
        return iv.ablate(lm, ids, target_id, node.layer, node.head, mode, clean_logits)
    import torch

    if mode not in iv.MODES:
        raise InputError("mode", f"must be one of {', '.join(iv.MODES)}, got {mode!r}.")
    if not 0 <= node.position < len(ids):
        raise InputError("position", f"must be between 0 and {len(ids) - 1}, got {node.position}.")
    if not 0 <= target_id < lm.dims.V:
        raise InputError("target", f"must be a token id between 0 and {lm.dims.V - 1:,}, got {target_id}.")
    with torch.no_grad():
        emb = lm.model.get_input_embeddings()(torch.tensor([ids], device=lm.device))[0].float().cpu()
    values = torch.zeros_like(emb) if mode == "zero" else emb.mean(0, keepdim=True).expand_as(emb).clone()
    before = clean_logits if clean_logits is not None else iv._last_logits(lm, ids)
    after = iv._forward_patched(lm, ids, 0, values, [[node.position]])[0]
    pb, pa = softmax(before.astype(np.float64)), softmax(after.astype(np.float64))
    return iv.Ablation(-1, None, mode, int(target_id), float(pb[target_id]), float(pa[target_id]),
                       float(before[target_id]), float(after[target_id]), int(before.argmax()), int(after.argmax()))
