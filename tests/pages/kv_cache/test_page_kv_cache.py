"""The KV cache page: the growth calculator, the measurement, and a prompt near the token budget. AppTest runs the page
file on its own (no app.py sidebar), from the session-state defaults in views/request/session.py, on the tiny random-
weight model (fixture `tiny_app`, fast tier).
"""
from pathlib import Path

from kit.apptest import page_text, run_page
from kit.paths import page_file
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = 300  # a trace on 2 shared CPU cores can take tens of seconds


def test_kv_cache_growth_calculator_and_measurement(tiny_app):
    at = run_page("kv_cache")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["KV bytes per token"] == "147.5 KB"  # Qwen3-8B, 16-bit, the default choice
    c = tiny_app.config  # K and V, every layer, every KV head, head_dim numbers of 4 bytes (float32)
    assert metrics["Bytes per token (all layers)"] == \
        f"{2 * c.num_hidden_layers * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 4:,}"
    at.slider(key="kv_n_steps").set_value(3)
    at.button(key="kv_measure_btn").click().run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Same tokens chosen"] == "yes"
    at.selectbox(key="kv_model").set_value("Llama-3.1-8B").run()
    assert {m.label: m.value for m in at.metric}["KV bytes per token"] == "131.1 KB"


def test_kv_cache_measurement_stays_within_the_token_budget(tiny_app):
    at = AppTest.from_file(page_file("kv_cache"), default_timeout=TIMEOUT)
    at.session_state["req_question"] = "Tomatoes are fruit. " * 120  # a prompt of a bit over 600 tokens
    at.session_state["req_max_new_tokens"] = 2
    at.run()
    assert not at.exception, at.exception
    options = at.radio(key="kv_repeat").options
    assert len(options) == 1 and options[0].endswith("(your prompt)")  # × 4 and × 8 exceed 1,024 tokens
    T = int(options[0].split()[0].replace(",", ""))
    assert 512 < T <= 1024 - 16
    assert f"× 4 ({4 * T:,} + 16" in page_text(at) and "not offered" in page_text(at)
    at.slider(key="kv_n_steps").set_value(32).run()
    assert not at.exception
    # a prompt longer than the budget: nothing to offer, the button is disabled and the page says why
    at.session_state["req_question"] = "Tomatoes are fruit. " * 200
    at.run()
    assert not at.exception, at.exception
    assert at.button(key="kv_measure_btn").disabled
    assert any("Ask a shorter question" in i.value for i in at.info)
