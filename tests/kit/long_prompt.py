"""A prompt over 512 tokens (no stored attention, float16 captures), through a page in AppTest or through a trace:
the Layers and Attention pages' long-prompt tests."""
from kit.apptest import lighter_apptest
from kit.paths import page_file

LONG_PROMPT = "Tomatoes are fruit. " * 120  # > 512 prompt tokens


def run_long(name: str):
    """The page named `name` in AppTest on the long prompt (2 new tokens), checked to raise nothing."""
    from streamlit.testing.v1 import AppTest

    lighter_apptest()
    at = AppTest.from_file(page_file(name), default_timeout=240)
    at.session_state["req_question"] = LONG_PROMPT
    at.session_state["req_max_new_tokens"] = 2
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def trace_long(lm):
    """The long prompt's trace on `lm` (2 new tokens)."""
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    return run_trace(ChatRequest.from_question(LONG_PROMPT, options=GenerationOptions(max_new_tokens=2)), lm)
