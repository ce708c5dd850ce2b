"""The Request & template page: both styles of request body, the template's text marked, a system prompt in both.
AppTest runs the page file on its own (no app.py sidebar), from the session-state defaults in
views/request/session.py, on the tiny random-weight model (fixture `tiny_app`, fast tier).
"""
import json
from pathlib import Path

from kit.apptest import html_blocks, json_bodies, page_text, run_page
from kit.paths import page_file
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = 300  # a trace on 2 shared CPU cores can take tens of seconds


def test_request_template_shows_both_styles_and_marks_template_text(tiny_app):
    at = run_page("request")
    bodies = [json.loads(b) for b in json_bodies(at)]
    assert any("messages" in b and "stream" in b and "max_tokens" in b for b in bodies)
    html = " ".join(html_blocks(at))
    assert "&lt;|im_start|&gt;" in html and "color:#b91c1c" in html  # special tokens highlighted
    assert "You are a helpful AI assistant named SmolLM" in html  # default system prompt, template-added
    assert "Default system prompt" in page_text(at)


def test_request_template_with_a_system_prompt_puts_it_in_both_styles(tiny_app):
    at = AppTest.from_file(page_file("request"), default_timeout=TIMEOUT)
    at.session_state["req_system"] = "Answer in one sentence."
    at.session_state["req_max_new_tokens"] = 4
    at.run()
    assert not at.exception
    openai, anthropic = (json.loads(b) for b in json_bodies(at)[:2])
    assert openai["messages"][0] == {"role": "system", "content": "Answer in one sentence."}
    assert anthropic["system"] == "Answer in one sentence."
    assert all(m["role"] != "system" for m in anthropic["messages"])
