"""One step's explanation as a plain document (the CLI's `explain --json` and its printout): the record, the
direct logit attribution, the graph's edges and, when asked, the input attribution."""
from __future__ import annotations

from pipeline.attribution.dla import check_token, direct_logit_attribution, promoted_tokens
from pipeline.attribution.graph import contribution_graph
from pipeline.attribution.record import record_step, step_ids
from pipeline.attribution.window import attribution_window
from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel
from pipeline.text.token_names import token_text


def explain(lm: LanguageModel, prompt_ids: list[int], generated_ids: list[int], step: int = 0,
            target: int | None = None, minus: int | None = None, threshold: float = 0.04,
            max_nodes: int = 12, inputs: bool = False, ig_steps: int = 30,
            moving: list[int] | None = None, attends: tuple[int, int] | None = None,
            query: int | None = None) -> dict:
    """Why the model scored `target` (default: the token the run chose at `step`) as it did at decode step `step`.
    `moving`: the prompt positions integrated gradients moves from its baseline (default: all); the answer's
    tokens before the step always move. `attends` (layer, head): that head's scores at position `query` (default:
    the last) split into query part x key part terms, in `qk`. A step longer than attribution holds is read on its
    window (window.py): "left_out" says how many positions were not read."""
    window = attribution_window(step_ids(prompt_ids, generated_ids, step))
    ids = window.ids
    target = int(generated_ids[step]) if target is None else check_token("target", target, lm.dims.V)
    rec = record_step(lm, ids)
    dla = direct_logit_attribution(rec, lm, target, minus)
    graph = contribution_graph(rec, lm, threshold, max_nodes)
    doc = {"step": step, "positions": len(ids), "left_out": window.left_out,
           "target_text": token_text(lm.tokenizer, target),
           "minus_text": None if minus is None else token_text(lm.tokenizer, minus), **dla.to_json(),
           "note": "parts read through the final norm with its scale frozen at this run's value: exact for their "
                   "sum, linear per part",
           "graph": {"threshold": threshold, "max_nodes": max_nodes, "capped": graph.capped},
           "edges": graph.to_json()}
    best = sorted(((float(v), i, h) for (i, h), v in _items(dla.heads)), reverse=True)[:3]
    doc["top_heads"] = [{"layer": i, "head": h, "contribution": v,
                         "promotes": [token_text(lm.tokenizer, t) for t, _ in promoted_tokens(rec, lm, i, h, 5)[0]]}
                        for v, i, h in best]
    if attends is not None:
        from pipeline.attribution.qk import in_words, qk_attribution

        local = None if query is None else window.index_of(query)
        if query is not None and local is None:
            raise InputError("query", f"position {query} is left out of this long step's window (positions 1 to "
                                      f"{window.left_out} are not read); pick 0 or one of the last ones.")
        qa = qk_attribution(lm, rec, *attends, query=local)
        doc["qk"] = qa.to_json()
        doc["qk"]["said"] = [f"key {token_text(lm.tokenizer, ids[k.position])!r} ({k.probability:.0%}): "
                             + in_words(qa.parts, k) for k in qa.keys]
        if window.left_out:  # positions in the step's own numbering, as the rest of the explanation gives them
            doc["qk"]["query_position"] = window.positions[doc["qk"]["query_position"]]
            for key in doc["qk"]["keys"]:
                key["position"] = window.positions[key["position"]]
    if inputs:
        from pipeline.attribution.gradients import input_attribution

        positions = None if moving is None else [k for k in map(window.index_of, list(moving) + list(
            range(len(prompt_ids), window.total))) if k is not None]
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
