"""A question holding HTML is shown as text on the pages that show it (Journey, Request & template, Tokens, Tensors &
batch, Generation, KV cache): no tag reaches the page's HTML or its charts. AppTest runs the page file on its own (no
app.py sidebar), from the session-state defaults in views/request/session.py, on the tiny random-weight model
(fixture `tiny_app`, fast tier).
"""
import json
from pathlib import Path

import pytest
from kit.apptest import html_blocks
from kit.paths import page_file
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 300  # a trace on 2 shared CPU cores can take tens of seconds
MALICIOUS = "<img src=x onerror=alert(1)> <s>"


def plotly_strings(at: AppTest) -> str:
    return " ".join(json.dumps(json.loads(c.proto.spec), ensure_ascii=False) for c in at.get("plotly_chart"))


@pytest.mark.parametrize("page", ["journey", "request", "tokens", "tensors", "generation",
                                  "kv_cache"])
def test_malicious_question_is_shown_as_text(page, tiny_app):
    at = AppTest.from_file(page_file(page), default_timeout=TIMEOUT)
    at.session_state["req_question"] = MALICIOUS
    at.session_state["req_max_new_tokens"] = 8
    at.run()
    assert not at.exception, at.exception
    for block in html_blocks(at):
        assert "<img" not in block and "<s>" not in block
    charts = plotly_strings(at)
    assert "<img" not in charts and "<s>" not in charts
    if page in ("journey", "request", "tokens"):
        # the text did reach the page, escaped (chips split it into pieces such as '&lt;' and 'img')
        assert any("&lt;" in b and "alert" in b for b in html_blocks(at))
