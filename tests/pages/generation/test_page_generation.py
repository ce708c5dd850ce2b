"""The Generation page: metrics, the stream's events, Hugging Face's own greedy tokens, the replay. AppTest runs the
page file on its own (no app.py sidebar), from the session-state defaults in views/request/session.py, on the tiny
random-weight model (fixture `tiny_app`, fast tier); also once on the real model (marker `app`).
"""
import json

import torch
from kit.apptest import chart_data, json_bodies, named_by_a_path, run_page
from kit.tiny_models import prompt_ids


def test_generation_metrics_events_and_replay(page_lm):
    at = run_page("generation")
    labels = [m.label for m in at.metric]
    assert named_by_a_path(labels) and "Finish reason" in labels
    bodies = json_bodies(at)
    assert any('"text_delta"' in b for b in bodies)
    assert any('"completed"' in b for b in bodies)
    assert len(at.get("plotly_chart")) == 2  # the timeline, each token's time (the room's schedule: Prefill & decode)
    completed = next(json.loads(b) for b in bodies if '"completed"' in b)
    text = completed["text"]
    ids = prompt_ids(page_lm)
    x = torch.tensor([ids], device=page_lm.device)
    greedy = page_lm.model.generate(x, max_new_tokens=64, do_sample=False)[0, len(ids):].tolist()
    assert completed["generated_token_ids"] == greedy  # Hugging Face's own greedy decoding of the same prompt
    per_step, = chart_data(at.get("plotly_chart")[1])
    assert len(per_step["y"]) == len(greedy) == int(next(m.value for m in at.metric if m.label == "Tokens generated"))
    assert answer_blocks(at) == [text]  # the answer as plain text: no markdown, no LaTeX
    assert not any(text.strip()[:20] in m.value for m in at.markdown)
    at.select_slider(key="gen_speed").set_value("instant")
    at.button(key="gen_replay").click().run()
    assert not at.exception
    assert answer_blocks(at) == [text]  # the replay streams into the same plain-text block


def answer_blocks(at) -> list[str]:
    """The plain-text code blocks (language None): the answer; the JSON event blocks are not it."""
    return [c.value for c in at.code if c.language != "json"]
