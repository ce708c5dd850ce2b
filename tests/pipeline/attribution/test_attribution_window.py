"""Why this token on a prompt longer than attribution holds (pipeline/attribution/window.py): the step is read on
its first token and its last MAX_POSITIONS - 1, and the page and the CLI document say what was left out.
Reference for the real model: Hugging Face's own forward pass over the same window (`model`)."""
from pathlib import Path

import numpy as np
import pytest
import torch
from kit.tolerance import logits_tolerance, parts_tolerance, reading
from kit.paths import page_file
from streamlit.testing.v1 import AppTest

from pipeline.attribution.record import MAX_POSITIONS, record_step
from pipeline.attribution.window import attribution_window

ROOT = Path(__file__).resolve().parents[3]
LONG_QUESTION = "Tomatoes are fruit, and so are cucumbers, peppers and pumpkins. " * 60  # ~790 prompt tokens


def test_a_long_step_keeps_its_first_token_and_its_last_positions():
    w = attribution_window(list(range(100, 888)))  # 788 ids
    assert len(w.ids) == MAX_POSITIONS and w.left_out == 788 - MAX_POSITIONS and w.left_out_span == (1, 276)
    assert w.ids[0] == 100 and w.ids[1:] == list(range(100 + 277, 888))
    assert [w.index_of(p) for p in (0, 1, 276, 277, 787)] == [0, None, None, 1, 511]
    short = attribution_window([7, 8, 9])
    assert short.ids == [7, 8, 9] and short.left_out == 0 and short.left_out_span is None


def test_explain_reads_the_window_and_moves_only_kept_positions(tokenizer):
    from kit.tiny_models import make_tiny_lm

    from pipeline.attribution.explain import explain

    lm = make_tiny_lm(tokenizer, seed=1, num_hidden_layers=2, hidden_size=32, intermediate_size=64)
    prompt = tokenizer(LONG_QUESTION)["input_ids"]
    assert len(prompt) > MAX_POSITIONS
    moving = [1, 2, len(prompt) - 2, len(prompt) - 1]  # two left out, two kept
    doc = explain(lm, prompt, [5, 6], step=1, inputs=True, moving=moving, ig_steps=10)
    total = len(prompt) + 1
    assert doc["positions"] == MAX_POSITIONS and doc["left_out"] == total - MAX_POSITIONS
    rec = record_step(lm, attribution_window(prompt + [5]).ids)  # the window the step was read on
    assert doc["sum_of_parts"] == pytest.approx(doc["logit"], abs=parts_tolerance(rec, reading(rec, lm, 6)))
    assert doc["inputs"]["positions"] == [MAX_POSITIONS - 3, MAX_POSITIONS - 2, MAX_POSITIONS - 1]


@pytest.mark.model
def test_real_smollm2_attributes_a_788_token_prompt_on_its_last_512_positions(lm):
    """The parts add up to the logit Hugging Face's model gives on the same 512 positions."""
    from pipeline.attribution.explain import explain
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    ids = tokenize_request(lm.tokenizer, ChatRequest.from_question(LONG_QUESTION)).ids
    assert len(ids) > 700
    window = attribution_window(ids)
    with torch.no_grad():
        hf = lm.model(torch.tensor([window.ids], device=lm.device)).logits[0, -1].float().cpu().numpy()
    chosen = int(np.argmax(hf))
    doc = explain(lm, ids, [chosen], step=0)
    assert doc["positions"] == MAX_POSITIONS and doc["left_out"] == len(ids) - MAX_POSITIONS
    # HF's pass and the record's: float32 rounding apart; the parts against the record's own logit (kit.tolerance)
    assert doc["logit"] == pytest.approx(float(hf[chosen]), abs=float(logits_tolerance(lm, window.ids, [chosen])[0]))
    rec = record_step(lm, window.ids)
    assert doc["sum_of_parts"] == pytest.approx(doc["logit"], abs=parts_tolerance(rec, reading(rec, lm, chosen)))


def test_the_page_attributes_a_long_prompt_and_says_what_it_left_out(tiny_app):
    at = AppTest.from_file(page_file("why_token"), default_timeout=240)
    at.session_state["req_question"] = LONG_QUESTION
    at.session_state["req_max_new_tokens"] = 2
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert not any("Pick an earlier step" in w.value for w in at.warning)
    [note] = [i.value for i in at.info if "left out" in i.value]
    assert f"the last {MAX_POSITIONS - 1:,}" in note and "(the whole run: " in note
    assert len(at.get("plotly_chart")) >= 2  # the layer bars and the head map are drawn
    at.button(key="why_ig").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("off by" in c.value for c in at.caption)
