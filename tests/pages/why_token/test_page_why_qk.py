"""Why this token's deeper views (views/pages/why_token/qk.py) on the tiny model (fast tier): the QK matrix of a head
adds up to its score as the model computed it, and each kind of graph node (head, MLP, token) is shown in place, with
its ablation run and said."""
import numpy as np
import pytest
from kit.apptest import chart_data, run_page
from kit.tolerance import forward_tolerance


def matrix(at, key: str) -> np.ndarray:
    chart = next(c for c in at.get("plotly_chart") if c.key == key)
    return np.asarray(chart_data(chart)[0]["z"], dtype=float)


def test_qk_matrix_adds_up_to_the_heads_own_score(tiny_app):
    from kit.texts import DEFAULT_QUESTION

    from pipeline.attribution.qk import qk_attribution
    from pipeline.attribution.record import record_step, step_ids
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest

    at = run_page("why_token")
    layer, head = int(at.number_input(key="why_layer").value), int(at.selectbox(key="why_head").value)
    trace = run_trace(ChatRequest.from_question(DEFAULT_QUESTION), tiny_app)
    ids = step_ids(trace.ids, trace.generated_token_ids, 0)
    qa = qk_attribution(tiny_app, record_step(tiny_app, ids), layer, head)  # the split, computed again
    top = qa.keys[0]
    T = len(ids)  # the terms split the record's score (kit.tolerance: the blocks before, the norm, projections)
    d_score = forward_tolerance(tiny_app.dims, np.abs(top.terms).sum(), T, layers=layer + 1)
    assert matrix(at, "why_qk_matrix").sum() == pytest.approx(top.score, abs=d_score)
    text = " ".join(m.value for m in at.markdown)
    assert "Largest terms: the query's **" in text
    at.selectbox(key="why_qk_query").set_value(3).run()  # another query position
    assert not at.exception, [e.message for e in at.exception]
    again = qk_attribution(tiny_app, record_step(tiny_app, ids), layer, head, query=3)
    d_score = forward_tolerance(tiny_app.dims, np.abs(again.keys[0].terms).sum(), T, layers=layer + 1)
    assert matrix(at, "why_qk_matrix").sum() == pytest.approx(again.keys[0].score, abs=d_score)


def test_each_kind_of_graph_node_is_shown_and_ablated_in_place(page_lm):
    """Tiny model: its random heads carry too little to pass any threshold, so MLPs and tokens only; the real
    SmolLM2 (`app` tier) has heads on its routes too."""
    at = run_page("why_token")
    at.slider(key="why_threshold").set_value(0.01).run()
    labels = at.selectbox(key="why_node_pick").options
    kind_of = lambda label: "token" if label.startswith("token") else label.split(" ")[2]  # noqa: E731
    first = {}
    for i, label in enumerate(labels):
        first.setdefault(kind_of(label), i)
    assert set(first) == ({"MLP", "token"} if page_lm.dims.L == 4 else {"head", "MLP", "token"}), labels
    for kind, i in first.items():
        at.selectbox(key="why_node_pick").select_index(i).run()
        assert not at.exception, [e.message for e in at.exception]
        text = " ".join(m.value for m in at.markdown)
        assert "Strongest route through it: share" in text
        assert ("Why it attends there" in text) == (kind == "head")
        at.button(key="why_node_ablate").click().run()
        assert not at.exception, [e.message for e in at.exception]
        assert any(m.value.startswith("Without it (zero): probability of") for m in at.markdown), kind
