"""Branches of a run (What if): the run taken another way at chosen steps, and how a branch is named."""
from __future__ import annotations

from pipeline.run.record import Trace
from pipeline.server.run_queue import cost_of
from views.request.session import request_key_of
from views.server.state import get_model
from views.server.waiting import result_through_queue


def branch_for(trace: Trace, path: tuple[tuple[int, int], ...]) -> Trace:
    """The run taken another way at each (step, token id) of `path` in turn, once per server."""
    from pipeline.run.trace import branch_trace

    for n in range(1, len(path) + 1):
        step, token = path[n - 1]
        parent = trace
        trace = result_through_queue(("branch", request_key_of(trace), path[:n]),
                       lambda parent=parent, step=step, token=token: branch_trace(parent, step, token, get_model()),
                       cost=cost_of(0, len(parent.steps) - step))
    return trace


def branch_label(path: tuple[tuple[int, int], ...], original: Trace | None = None) -> str:
    """'step 4: '<0xA0> → 토'' — each forced token named after what the model had read before it
    (with `original`, the run the path starts from; else after nothing)."""
    from pipeline.text.unfinished import continuation_label

    tok = get_model().tokenizer
    names = []
    for n, (s, t) in enumerate(path):
        parent = None if original is None else branch_for(original, path[:n]) if n else original
        context = [] if parent is None else list(parent.ids) + parent.generated_token_ids[:s]
        names.append(f"step {s}: {continuation_label(tok, context, t)!r}")
    return " → ".join(names) or "the original run"
