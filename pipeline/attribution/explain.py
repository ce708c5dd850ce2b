"""One step's explanation as a plain document (the CLI's `explain --json` and its printout): the record, the
direct logit attribution, the graph's edges and, when asked, the input attribution."""
from __future__ import annotations

from ..model.interface import LanguageModel
from ..text.token_names import token_text
from .dla import check_token, direct_logit_attribution, promoted_tokens
from .graph import contribution_graph
from .record import record_step, step_ids


def explain(lm: LanguageModel, prompt_ids: list[int], generated_ids: list[int], step: int = 0,
            target: int | None = None, minus: int | None = None, threshold: float = 0.04,
            max_nodes: int = 12, inputs: bool = False, ig_steps: int = 30,
            moving: list[int] | None = None) -> dict:
    """Why the model scored `target` (default: the token the run chose at `step`) as it did at decode step `step`.
    `moving`: the prompt positions integrated gradients moves from its baseline (default: all); the answer's
    tokens before the step always move."""
    ids = step_ids(prompt_ids, generated_ids, step)
    target = int(generated_ids[step]) if target is None else check_token("target", target, lm.dims.V)
    rec = record_step(lm, ids)
    dla = direct_logit_attribution(rec, lm, target, minus)
    graph = contribution_graph(rec, lm, threshold, max_nodes)
    doc = {"step": step, "positions": len(ids), "target_text": token_text(lm.tokenizer, target),
           "minus_text": None if minus is None else token_text(lm.tokenizer, minus), **dla.to_json(),
           "note": "parts read through the final norm with its scale frozen at this run's value: exact for their "
                   "sum, linear per part",
           "graph": {"threshold": threshold, "max_nodes": max_nodes, "capped": graph.capped},
           "edges": graph.to_json()}
    best = sorted(((float(v), i, h) for (i, h), v in _items(dla.heads)), reverse=True)[:3]
    doc["top_heads"] = [{"layer": i, "head": h, "contribution": v,
                         "promotes": [token_text(lm.tokenizer, t) for t, _ in promoted_tokens(rec, lm, i, h, 5)[0]]}
                        for v, i, h in best]
    if inputs:
        from .gradients import input_attribution

        positions = None if moving is None else list(moving) + list(range(len(prompt_ids), len(ids)))
        ia = input_attribution(lm, ids, target, steps=ig_steps, positions=positions)
        doc["inputs"] = {"baseline": ia.baseline, "positions": positions, "steps": ia.steps, "panels": ia.panels,
                         "log_prob": ia.log_prob,
                         "baseline_log_prob": ia.baseline_log_prob, "completeness_gap": ia.completeness_gap,
                         "grad_x_input": ia.grad_x_input.tolist(), "integrated_gradients": ia.integrated.tolist()}
    return doc


def _items(heads):
    for i, row in enumerate(heads):
        for h, v in enumerate(row):
            yield (i, h), v
