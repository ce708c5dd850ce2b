"""The Why-this-token page (views/pages/why_token/page.py) on the tiny model (fast tier): its charts' numbers are the
attribution of the run's own chosen token, the buttons run the interventions and integrated gradients, and
token text reaches the page escaped."""
from pathlib import Path

import numpy as np
import pytest
from kit.apptest import chart_data, run_page
from kit.tolerance import assert_within, float32_tolerance, heads_tolerance, parts_tolerance, reading

ROOT = Path(__file__).resolve().parents[3]



def test_logit_parts_on_the_page_add_up_to_the_runs_own_score(tiny_app):
    from kit.texts import DEFAULT_QUESTION

    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest

    at = run_page("why_token")
    trace = run_trace(ChatRequest.from_question(DEFAULT_QUESTION), tiny_app)  # the page's run, run again
    chosen = trace.generated_token_ids[0]
    bars = chart_data(at.get("plotly_chart")[0])  # attention, MLP per layer
    heads = np.asarray(chart_data(at.get("plotly_chart")[1])[0]["z"])
    L = tiny_app.dims.L
    assert len(bars[0]["y"]) == L and heads.shape == (L, tiny_app.dims.H)
    from pipeline.attribution.record import record_step

    rec = record_step(tiny_app, trace.ids)  # the step's record: what its parts' rounding is sized by
    u = reading(rec, tiny_app, chosen)
    heads_tol = np.array([heads_tolerance(rec, tiny_app, i) @ u for i in range(L)])
    assert_within(heads.sum(1), bars[0]["y"], heads_tol, "the heads make up their layer's bar")
    text = " ".join(m.value for m in at.markdown)
    assert f"**{trace.step_logits[0][chosen]:.3f}**" in text  # the score shown is the run's own logit
    embedding = float(at.get("plotly_chart")[0].proto.spec.split("the embedding adds ")[1].split('"')[0])
    # the embedding's part printed to 3 decimals (5e-4), the parts within float32 rounding of the logit
    assert embedding + np.sum(bars[0]["y"]) + np.sum(bars[1]["y"]) == pytest.approx(
        float(trace.step_logits[0][chosen]), abs=5e-4 + parts_tolerance(rec, u))
    at.slider(key="why_threshold").set_value(0.3).run()  # a higher threshold keeps fewer routes
    assert not at.exception
    few = [c.value for c in at.caption if " routes above " in c.value and c.value[0].isdigit()][0]
    at.slider(key="why_threshold").set_value(0.02).run()
    many = [c.value for c in at.caption if " routes above " in c.value and c.value[0].isdigit()][0]
    assert int(few.split()[0]) < int(many.split()[0])


def test_buttons_ablate_patch_and_integrate(tiny_app):
    at = run_page("why_token")
    at.button(key="why_ablate").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("probability of" in m.value for m in at.markdown)
    at.button(key="why_ig").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("off by" in c.value for c in at.caption)
    at.text_input(key="why_corrupted").set_value("Are carrots fruit?").run()
    at.button(key="why_patch").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(c.value.startswith("1 = the clean answer") for c in at.caption)
    assert any(m.value.startswith("Agreement over the 12 parts patched for real") for m in at.markdown)
    at.button(key="why_patch_map").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(c.value.startswith("The full map: ") for c in at.caption)
    at.text_input(key="why_corrupted").set_value("Are carrots a kind of fruit?").run()
    at.button(key="why_patch").click().run()
    assert any("corrupted: must have as many tokens" in e.value for e in at.error)


def held_patching(monkeypatch):
    """The page's activation patching, its real chunks, held at its third chunk until `go_on` is set (the test's
    stand-in for a long job on the real model): returns (held, go_on, runs) events and the list of runs made."""
    import threading

    from pipeline.attribution import component_patching as cp

    held, go_on, runs = threading.Event(), threading.Event(), []
    real = cp.estimate_steps

    def steps(*args, **kw):
        inner = real(*args, **kw)  # the input is checked now, as on the page

        def chunks():
            runs.append(1)
            yield next(inner)
            yield next(inner)
            held.set()
            assert go_on.wait(60)
            return (yield from inner)
        return chunks()

    monkeypatch.setattr(cp, "estimate_steps", steps)
    return held, go_on, runs


def patching_jobs():
    from views.server.state import run_queue

    return [t for t in run_queue().long_jobs() if "component patching" in t.key]


def progress_texts(at) -> list[str]:
    return [p.proto.text for p in at.get("progress")]


def test_patching_shows_its_progress_and_the_one_who_started_it_can_cancel_it(tiny_app, monkeypatch):
    """Activation patching runs in the model's queue a layer at a time: past the page's own wait (0 s here) a
    panel shows how far it is, with a Cancel button; Cancel stops it between two chunks and frees the queue."""
    from concurrent.futures import CancelledError

    from views.server import long_job
    from views.server.state import run_queue

    monkeypatch.setattr(long_job, "IN_PAGE_WAIT_S", 0.0)
    held, go_on, runs = held_patching(monkeypatch)
    at = run_page("why_token")
    at.text_input(key="why_corrupted").set_value("Are lemons fruit?")
    at.button(key="why_patch").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert held.wait(60)  # the queue's worker is in the job's third chunk: two are done
    [job] = patching_jobs()
    at.run()
    [text] = progress_texts(at)
    assert text.startswith(f"⏳ Patching: 2 of {job.progress.total} parts done (the corrupted question run, "
                           "forward and backward)")
    cancel = [b for b in at.button if b.label == "Cancel"]
    assert len(cancel) == 1 and not any(c.value.startswith("1 = the clean answer") for c in at.caption)
    cancel[0].click().run()
    assert not at.exception, [e.message for e in at.exception]
    stopped = f"You stopped patching after 2 of its {job.progress.total} parts."
    assert any(i.value == stopped for i in at.info), [i.value for i in at.info]
    assert not progress_texts(at) and not [b for b in at.button if b.label == "Cancel"]
    go_on.set()
    with pytest.raises(CancelledError):
        job.result(60)
    assert job.chunks == 3 and patching_jobs() == []  # stopped after the chunk it was in
    assert run_queue().submit("after", lambda: "answer", cost=1).result(60) == "answer"  # the worker is free
    at.run()
    assert not any(c.value.startswith("1 = the clean answer") for c in at.caption)  # nothing was kept
    assert runs == [1]


def test_two_sessions_patching_the_same_share_one_run_and_its_result_with_when_it_was_made(tiny_app, monkeypatch):
    """The second session to press Patch with the same two questions joins the first one's run; once it is done,
    both, and a third session that never pressed, see the same heatmap with when it was made."""
    from views.server import long_job

    monkeypatch.setattr(long_job, "IN_PAGE_WAIT_S", 0.0)
    held, go_on, runs = held_patching(monkeypatch)
    first, second = run_page("why_token"), run_page("why_token")
    for at in (first, second):
        at.text_input(key="why_corrupted").set_value("Are pears fruit?")
        at.button(key="why_patch").click().run()
        assert not at.exception, [e.message for e in at.exception]
    assert held.wait(60)
    [job] = patching_jobs()
    assert len(job.askers) == 2 and runs == [1]  # the second session joined the first one's run
    go_on.set()
    job.result(60)
    later = run_page("why_token")  # a third session that never pressed Patch
    later.text_input(key="why_corrupted").set_value("Are pears fruit?").run()
    charts = []
    for at in (first.run(), second.run(), later):
        assert not at.exception, [e.message for e in at.exception]
        [caption] = [c.value for c in at.caption if c.value.startswith("1 = the clean answer")]
        assert "Made at " in caption and "kept for everyone who asks the same" in caption
        [chart] = [c for c in at.get("plotly_chart") if "attribution patching" in c.proto.spec]
        charts.append(np.asarray(chart_data(chart)[0]["z"]))
    np.testing.assert_array_equal(charts[0], charts[1])
    np.testing.assert_array_equal(charts[0], charts[2])
    assert runs == [1]


def test_neurons_table_adds_up_to_the_mlps_bar(tiny_app):
    """The MLP's neurons on the page: by default the layer whose MLP moved the score most, the last position; the
    caption's sum of every neuron is that MLP's bar of the chart."""
    at = run_page("why_token")
    mlp_bars = np.asarray(chart_data(at.get("plotly_chart")[0])[1]["y"])
    layer = int(np.argmax(np.abs(mlp_bars)))
    assert at.number_input(key="why_neuron_layer").value == layer
    [line] = [c.value for c in at.caption if c.value.startswith(f"Layer {layer}'s MLP adds")]
    from kit.texts import DEFAULT_QUESTION

    from pipeline.attribution.neurons import neuron_contributions
    from pipeline.attribution.record import record_step
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest

    trace = run_trace(ChatRequest.from_question(DEFAULT_QUESTION), tiny_app)
    rec = record_step(tiny_app, trace.ids)
    nc = neuron_contributions(rec, tiny_app, layer, trace.generated_token_ids[0])
    # printed to 3 decimals (5e-4); the activations recomputed from one position (two dot products of D terms
    # after the input norm) then summed over I neurons, on the contributions' own absolute sum (kit.tolerance)
    d = tiny_app.dims
    recomputed = float32_tolerance(max(d.D, d.D_mlp), np.abs(nc.contributions).sum(), depth=3)
    shown = float(line.split("neurons add up to ")[1].split(",")[0])
    assert shown == pytest.approx(mlp_bars[layer], abs=5e-4 + recomputed)
    at.selectbox(key="why_neuron_position").set_value(0).run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(c.value.startswith(f"Layer {layer}'s MLP adds") and "at position 0" in c.value for c in at.caption)


def test_a_long_prompts_graph_and_map_say_prompt_positions(tiny_app):
    """A ~610-token question: attribution reads a window of 512 positions (the first and the last 511), yet the
    graph's columns and the full map's columns are labelled with their places in the whole prompt, and the graph has
    a column only where its routes pass. Before: '(511)' where the prompt position was 612, every route piled into
    the right-most columns of a 512-wide axis, and the full map failed (its labels came from the window)."""
    import json
    import re

    from kit.apptest import chart
    from kit.texts import LONG_QUESTION

    from pipeline.attribution.record import MAX_POSITIONS
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    T = len(tokenize_request(tiny_app.tokenizer, ChatRequest.from_question(LONG_QUESTION)).ids)
    assert T > MAX_POSITIONS
    at = run_page("why_token", LONG_QUESTION)
    spec = json.loads(chart(at, "why_graph").proto.spec)
    ticks = spec["layout"]["xaxis"]["ticktext"]
    said = [int(re.match(r"(?:… )?\((\d+)\)", t).group(1)) for t in ticks]
    assert said[-1] == T - 1  # the predicting position, by its place in the prompt
    assert all(p == 0 or T - MAX_POSITIONS < p < T for p in said), said  # window positions, renumbered to the prompt
    assert said == sorted(said) and len(said) <= 40
    columns = spec["layout"]["xaxis"]["range"][1] + 0.5
    assert columns < 60, columns  # one column per position a route passes through, not 512
    bad = LONG_QUESTION.replace("Box 24 is red", "Box 24 is blue")
    at.text_input(key="why_corrupted").set_value(bad).run()
    assert any(c.value.startswith("Expected, of the model's time: ") for c in at.caption)
    at.button(key="why_patch_map").click().run()
    assert not at.exception, [e.message for e in at.exception]
    x = chart_data(chart(at, "why_patching"))[0]["x"]
    assert [int(re.match(r"\((\d+)\)", t).group(1)) for t in x] == list(range(T - 48, T))


def test_percentages_rounding_to_zero_have_no_sign():
    from views.pages.why_token.patching import percent

    assert [percent(v, sign=True) for v in (-0.004, 0.004, 0.0, 0.07, -0.126)] == ["0%", "0%", "0%", "+7%", "-13%"]
    assert [percent(v) for v in (-0.004, 0.5, -0.25)] == ["0%", "50%", "-25%"]
