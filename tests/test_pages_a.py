"""AppTest per page (Journey, Request & template, Tokens, Tensors & batch, Generation, KV cache).

AppTest runs one page file on its own (no app.py sidebar), so each page works from the session-state
defaults in views/request/session.py. The pages run on the tiny random-weight model (fixture `tiny_app`, fast
tier); Journey and Generation also run once on the real model (marker `app`). The model and the traces
are cached per process, so the default request runs once per model.
"""
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from kit.apptest import chart_data, run_page
from kit.paths import page_file
from kit.tiny_models import prompt_ids
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300  # a trace on 2 shared CPU cores can take tens of seconds
MALICIOUS = "<img src=x onerror=alert(1)> <s>"



def html_blocks(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if m.proto.allow_html]


def plotly_strings(at: AppTest) -> str:
    return " ".join(json.dumps(json.loads(c.proto.spec), ensure_ascii=False) for c in at.get("plotly_chart"))


def json_bodies(at: AppTest) -> list[str]:
    """The JSON code blocks (st.code(json_text(...), language="json")), each checked to parse as JSON."""
    bodies = [c.value for c in at.code if c.language == "json"]
    for body in bodies:
        json.loads(body)
    return bodies


def texts(at: AppTest) -> str:
    return " ".join(m.value for m in list(at.markdown) + list(at.caption) + list(at.subheader))


def first_token_top(lm, ids: list[int], k: int = 8) -> tuple[list[int], np.ndarray]:
    """The k most likely first tokens and their probabilities, from one plain forward pass of the prompt."""
    with torch.inference_mode():
        logits = lm.model(torch.tensor([ids], device=lm.device)).logits[0, -1].cpu()
    top = torch.softmax(logits.double(), -1).topk(k)
    return top.indices.tolist(), top.values.numpy()


def named_by_a_path(labels: list[str]) -> bool:
    """TTFT named by the captured prefill, TPOT by the path the run's decode steps recorded (in the server's batch,
    or captured alone): pipeline.costs.named_time."""
    from pipeline.costs.named_time import PATH_NAMES, time_label

    return "TTFT (captured run)" in labels and len({time_label("TPOT", p) for p in PATH_NAMES} & set(labels)) == 1


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


def test_request_template_shows_both_styles_and_marks_template_text(tiny_app):
    at = run_page("request")
    bodies = [json.loads(b) for b in json_bodies(at)]
    assert any("messages" in b and "stream" in b and "max_tokens" in b for b in bodies)
    html = " ".join(html_blocks(at))
    assert "&lt;|im_start|&gt;" in html and "color:#b91c1c" in html  # special tokens highlighted
    assert "You are a helpful AI assistant named SmolLM" in html  # default system prompt, template-added
    assert "Default system prompt" in texts(at)


def test_request_template_with_a_system_prompt_puts_it_in_both_styles(tiny_app):
    at = AppTest.from_file(str(ROOT / "views" / "pages" / "request.py"), default_timeout=TIMEOUT)
    at.session_state["req_system"] = "Answer in one sentence."
    at.session_state["req_max_new_tokens"] = 4
    at.run()
    assert not at.exception
    openai, anthropic = (json.loads(b) for b in json_bodies(at)[:2])
    assert openai["messages"][0] == {"role": "system", "content": "Answer in one sentence."}
    assert anthropic["system"] == "Answer in one sentence."
    assert all(m["role"] != "system" for m in anthropic["messages"])


def test_tokens_page_chips_comparison_and_capitals(tiny_app):
    at = run_page("tokens")
    assert "Tokens in the prompt" in [m.label for m in at.metric]
    assert any("␣" in h for h in html_blocks(at))  # visible spaces in chips
    frames = [df.value for df in at.dataframe]
    comparison = next(f for f in frames if "cost ratio vs this model" in f.columns)
    assert set(comparison["tokenizer"]) >= {"cl100k_base", "o200k_base", "llama3", "qwen3"}
    assert (comparison["tokens"] > 0).all()
    capitals = next(f for f in frames if "o200k_base ids" in f.columns)
    assert list(capitals["o200k_base ids"]) == ["6698", "14221", "26186"]
    # the default try-your-own text holds '<|im_end|>': the naive tokenization shows the control token
    assert "naively" in texts(at)
    at.text_area(key="tok_text").set_value("Are tomatoes fruit?").run()
    assert not at.exception
    assert "Tokenized naively the same text" not in texts(at)  # no look-alikes left: both ways agree


def test_tensors_batch_pads_three_requests(tiny_app):
    at = run_page("tensors")
    summary = next(df.value for df in at.dataframe if "padding cells" in df.value.columns)
    assert list(summary["tensor"]) == ["input_ids", "position_ids", "attention_mask"]
    assert summary["shape (B, T)"].iloc[0].startswith("(3, ")
    assert set(summary["dtype"]) == {"int64"}
    assert summary["padding cells"].iloc[0] > 0
    assert batch_mask(at)[1][0] == 0  # left padding: the short second request starts with padding
    at.radio(key="batch_side").set_value("right").run()
    assert not at.exception
    mask = batch_mask(at)
    assert mask[1][0] == 1 and mask[1][-1] == 0  # right padding: its padding moved to the end


def batch_mask(at: AppTest) -> list[list[int]]:
    """The three-request batch's attention_mask grid (the only (3, T) table of zeros and ones)."""
    grids = [df.value for df in at.dataframe if df.value.shape[0] == 3 and df.value.shape[1] > 3
             and all(pd.api.types.is_integer_dtype(d) for d in df.value.dtypes)]  # not the (3, 4) summary table
    masks = [g for g in grids if set(np.unique(g.to_numpy())) <= {0, 1}]
    assert len(masks) == 1, [g.shape for g in grids]
    return masks[0].to_numpy().tolist()


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


def answer_blocks(at: AppTest) -> list[str]:
    """The plain-text code blocks (language None): the answer; the JSON event blocks are not it."""
    return [c.value for c in at.code if c.language != "json"]


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
    at = AppTest.from_file(str(ROOT / "views" / "pages" / "kv_cache" / "page.py"), default_timeout=TIMEOUT)
    at.session_state["req_question"] = "Tomatoes are fruit. " * 120  # a prompt of a bit over 600 tokens
    at.session_state["req_max_new_tokens"] = 2
    at.run()
    assert not at.exception, at.exception
    options = at.radio(key="kv_repeat").options
    assert len(options) == 1 and options[0].endswith("(your prompt)")  # × 4 and × 8 exceed 1,024 tokens
    T = int(options[0].split()[0].replace(",", ""))
    assert 512 < T <= 1024 - 16
    assert f"× 4 ({4 * T:,} + 16" in texts(at) and "not offered" in texts(at)
    at.slider(key="kv_n_steps").set_value(32).run()
    assert not at.exception
    # a prompt longer than the budget: nothing to offer, the button is disabled and the page says why
    at.session_state["req_question"] = "Tomatoes are fruit. " * 200
    at.run()
    assert not at.exception, at.exception
    assert at.button(key="kv_measure_btn").disabled
    assert any("Ask a shorter question" in i.value for i in at.info)


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
