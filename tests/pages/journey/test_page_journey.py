"""The Journey page: every stage, its request JSON and events, one chip per prompt token, the first-token candidates
against a plain forward pass, the tensors' first values. AppTest runs the page file on its own (no app.py sidebar),
from the session-state defaults in views/request/session.py, on the tiny random-weight model (fixture `tiny_app`,
fast tier); also once on the real model (marker `app`).
"""
import re

import numpy as np
import pytest
import torch
from kit.apptest import chart_data, html_blocks, json_bodies, named_by_a_path, run_page
from kit.texts import KOREAN, LONG_QUESTION
from kit.tiny_models import prompt_ids


def first_token_top(lm, ids: list[int], k: int = 8) -> tuple[list[int], np.ndarray]:
    """The k most likely first tokens and their probabilities, from one plain forward pass of the prompt."""
    with torch.inference_mode():
        logits = lm.model(torch.tensor([ids], device=lm.device)).logits[0, -1].cpu()
    top = torch.softmax(logits.double(), -1).topk(k)
    return top.indices.tolist(), top.values.numpy()


def test_journey_walks_every_stage(page_lm):
    at = run_page("journey")
    ids = prompt_ids(page_lm)
    assert [s.value.split(".")[0] for s in at.subheader] == [str(i) for i in range(1, 8)]
    bodies = json_bodies(at)
    assert any('"messages"' in b and "Are tomatoes fruit?" in b for b in bodies)  # request JSON
    assert any('"batch_index"' in b for b in bodies)  # batch entry
    assert any('"text_delta"' in b for b in bodies)  # streaming events
    assert any('"completed"' in b and '"finish_reason"' in b for b in bodies)  # completed event
    assert named_by_a_path([m.label for m in at.metric])
    chips = next(h for h in html_blocks(at) if re.search(r"title='#\d+ id ", h))
    assert [int(i) for i in re.findall(r"title='#\d+ id (\d+)", chips)] == ids  # one chip per prompt token
    top_ids, top_probs = first_token_top(page_lm, ids)
    bars, = chart_data(at.get("plotly_chart")[0])  # the first-token candidates, most likely at the top
    np.testing.assert_allclose(np.asarray(bars["x"])[::-1], top_probs, rtol=1e-4)
    assert [int(re.match(r"id (\d+)", h).group(1)) for h in bars["hovertext"][::-1]] == top_ids
    assert any(df.value.shape[0] == 4 for df in at.dataframe)  # queued -> prefill -> decoding -> completed
    tensors = next(df.value for df in at.dataframe if "first values" in df.value.columns)
    T = int(tensors["shape (B, T)"].iloc[0].strip("()[]").split(",")[1])
    first = tensors["first values"].iloc[0]  # input_ids: its first values, as many as fit the cell
    assert T == len(ids) and first.strip("[]").replace(", …", "").split(", ") == [str(i) for i in ids[:len(
        first.split(", ")) - first.endswith("…]")]]
    for shown in tensors["first values"]:  # '…' only when the row was cut
        values = shown.strip("[]").replace(", …", "").split(", ")
        assert len(shown) <= 30 and shown.endswith(", …]") == (len(values) < T)


@pytest.mark.app
def test_journey_says_a_korean_answer_was_cut_and_sends_no_u_fffd():
    """5 tokens end after 2 of 토's 3 bytes: no '�' in a text_delta or the completed text, and the page says so."""
    from kit.apptest import page_app

    at = page_app("journey", req_question=KOREAN, req_max_new_tokens=5)
    at.run()
    assert not at.exception, at.exception
    assert any("The answer was cut" in i.value and "<0xED><0x86>" in i.value for i in at.info)
    assert not any("\ufffd" in c.value for c in at.code)  # the deltas and the completed event


def test_journey_tells_one_story_about_a_long_prefill(tiny_app):
    """Over 512 tokens the prefill runs in chunks: section 4 must not say 'one pass' while section 7 says 2."""
    from kit.apptest import page_app

    at = page_app("journey", req_question=LONG_QUESTION, req_max_new_tokens=3)
    at.run()
    assert not at.exception, at.exception
    section4 = next(m.value for m in at.markdown if "Each token id picks one row" in m.value)
    assert "one pass" not in section4 and "2 passes of up to 512 tokens" in section4, section4
    assert any("a prefill in 2 chunks of up to 512 tokens" in c.value for c in at.caption)
