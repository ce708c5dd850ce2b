"""Batched decoding on the real model: batched runs equal single runs, a refused request does not stop its batch, the
plain serving path's tokens, the offline report."""

import pytest
from kit.tolerance import agreed_steps, any_logit_tolerance, assert_within

from pipeline.core.errors import InputError


# ---- batched decoding on the real model ------------------------------------------------------------
@pytest.mark.model
def test_batched_runs_equal_single_runs(lm):
    from pipeline.run.trace import run_trace, run_traces
    from pipeline.stages.request import ChatRequest, GenerationOptions

    requests = [ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=12)),
                ChatRequest.from_question("토마토는 과일이야?", options=GenerationOptions(
                    max_new_tokens=12, temperature=0.8, top_p=0.9, seed=3)),
                ChatRequest.from_question("Write a haiku about rain.", options=GenerationOptions(
                    max_new_tokens=20, stop=("rain",)))]
    batch = run_traces(requests, lm)
    for request, b in zip(requests, batch):
        a = run_trace(request, lm)
        # padded rows and one row: float32 rounding apart (kit.tolerance); the same answer unless a step's two best
        # scores tie within it
        tol = any_logit_tolerance(lm, len(a.ids) + len(a.generated_token_ids))
        n = agreed_steps(b.generated_token_ids, a.generated_token_ids, a.step_logits, tol, str(request.messages))
        assert_within(b.step_logits[:n], a.step_logits[:n], tol, "step scores")
        if n == len(a.generated_token_ids) == len(b.generated_token_ids):
            assert b.finish_reason == a.finish_reason and b.text == a.text
            assert b.steps[-1].kv_cache_bytes == a.steps[-1].kv_cache_bytes  # its own rows, not the padding
        assert b.steps[0].batch_size == 3
        assert [s.kv_cache_tokens for s in b.steps[:n]] == [s.kv_cache_tokens for s in a.steps[:n]]


@pytest.mark.model
def test_a_refused_request_does_not_stop_its_batch(lm):
    from pipeline.run.trace import run_traces
    from pipeline.stages.request import ChatRequest

    long = ChatRequest.from_question("garden " * 3000)
    ok = ChatRequest.from_question("Hi")
    out = run_traces([long, ok], lm, max_prompt_tokens=1000)
    assert isinstance(out[0], InputError) and out[0].field == "messages"
    assert out[1].finish_reason in ("eos", "length")


@pytest.mark.model
def test_html_report_is_self_contained(default_trace):
    from ui.report import trace_report

    html = trace_report(default_trace)
    assert html.count("<h2>") == 12 and "Plotly.newPlot" in html
    assert "<script src=" not in html and "<link " not in html  # nothing fetched when opened
    assert default_trace.text[:20].replace("'", "&#x27;") in html


@pytest.mark.model
def test_plain_serving_path_chooses_the_captured_runs_tokens(lm):
    from pipeline.faster.fast_path import generate, stream
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    for question, options in (("Are tomatoes fruit?", GenerationOptions(max_new_tokens=16)),
                              ("토마토는 과일이야?", GenerationOptions(max_new_tokens=12, temperature=0.8, seed=2)),
                              ("Count to ten.", GenerationOptions(max_new_tokens=30, stop=("5",)))):
        request = ChatRequest.from_question(question, options=options)
        captured, plain = run_trace(request, lm), generate(lm, request)
        assert plain.generated == captured.generated_token_ids and plain.text == captured.text
        assert plain.finish_reason == captured.finish_reason
        events = list(stream(lm, request))
        assert "".join(e.delta for e in events) == captured.text  # the live deltas rebuild the answer
        assert all(a.t_s <= b.t_s for a, b in zip(events[:-2], events[1:-1]))  # in time order
        *deltas, done = events  # one event type on both paths: the plain stream sends the captured run's deltas
        assert [(e.step, e.delta) for e in deltas] == [(e.step, e.delta) for e in captured.decode.events]
        assert done.kind == "completed" and done.finish_reason == captured.finish_reason
