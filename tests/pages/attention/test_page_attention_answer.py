"""The Attention page over the answer too (views/pages/attention/answer.py), on the tiny model (fast tier): with the
toggle on, the grid has a row for every answer token, and its weights are Hugging Face's own eager attention over the
prompt followed by the answer."""
import numpy as np
from kit.apptest import chart, chart_data, run_page
from kit.tiny_models import hf_forward, prompt_ids
from kit.tolerance import assert_within, attention_tolerance, forward_tolerance


def test_the_grid_covers_the_answer_with_hfs_own_weights(tiny_app):
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest

    from views.pages.attention.answer import answer_prefills
    from views.server.state import result_store, server_reuse
    from views.server.waiting import model_result_key

    question = "Which tokens does the answer look back at?"  # asked by no other test: its run is made (and its
    # prompt's blocks kept in the prefix cache) here, not read from the store of runs
    at = run_page("attention", question=question)
    prompt = prompt_ids(tiny_app, question)
    T = len(prompt)
    assert np.asarray(chart_data(chart(at, "at_heatmap"))[0]["customdata"]).shape == (T, T)  # the prompt only
    reused = sum(c.session_tokens_reused for c in server_reuse().caches.values())
    at.toggle(key="at_answer").set_value(True).run()
    assert not at.exception, [e.message for e in at.exception]
    answer = run_trace(ChatRequest.from_question(question), tiny_app).generated_token_ids  # the page's run
    ids = prompt + list(answer)
    # the pass went through the queue, is kept in its own small store (not in the shared result store, whose budget a
    # long prompt's pass would fill), and read the prompt's blocks, kept by the page's run with their captures, from
    # the server's prefix cache
    key = model_result_key(("answer prefill", tuple(ids)))
    assert answer_prefills().peek(key) is not None and result_store().peek(key) is None
    block = server_reuse().config.block_size
    assert sum(c.session_tokens_reused for c in server_reuse().caches.values()) - reused >= T // block * block > 0
    layer, head = int(at.slider(key="at_layer").value), int(at.selectbox(key="at_head").value)
    weights = np.asarray(chart_data(chart(at, "at_heatmap"))[0]["customdata"], dtype=float)
    n = len(ids)
    assert n < 256 and weights.shape == (n, n)  # short enough for the whole grid
    # the page's run and HF's pass: scores from q and k within the blocks' float32 rounding (kit.tolerance)
    from pipeline.model.prefill import run_prefill

    p = run_prefill(tiny_app, ids).prefill
    d = tiny_app.dims
    tol = attention_tolerance(p.q_rot[layer, head], p.k_rot[layer, d.kv_head(head)], d.Dh ** -0.5, n,
                              forward_tolerance(d, 1.0, n))
    assert_within(weights, hf_forward(tiny_app, ids).attentions[layer][0, head].cpu().numpy(), tol, "weights")
