"""The Tokens page: chips with visible spaces, the tokenizers compared, capitals, the text typed in. AppTest runs the
page file on its own (no app.py sidebar), from the session-state defaults in views/request/session.py, on the tiny
random-weight model (fixture `tiny_app`, fast tier).
"""
import pytest
from kit.apptest import html_blocks, page_app, page_text, run_page, shown

pytestmark = pytest.mark.usefixtures("tiny_app")  # AppTest on the tiny model (fast tier)


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
    assert "naively" in page_text(at)
    at.text_area(key="tok_text").set_value("Are tomatoes fruit?").run()
    assert not at.exception
    assert "Tokenized naively the same text" not in page_text(at)  # no look-alikes left: both ways agree


def test_the_tokens_page_cuts_a_long_text_at_its_limit_with_a_note():
    at = page_app("tokens").run()
    text = "Are tomatoes fruit? " * 3_500  # 70,000 characters: 244 s of one core before the limit
    at.text_area(key="tok_text").set_value(text).run()
    assert not at.exception, at.exception
    assert "Text to tokenize takes at most 4,000 characters" in shown(at.info)
    table = next(df.value for df in at.dataframe if "chars per token" in df.value.columns)
    tokens, per_token = table.iloc[0]["tokens"], table.iloc[0]["chars per token"]
    assert tokens * per_token == pytest.approx(4_000, rel=0.01)  # the table counts the text as cut


def test_the_tokens_page_refuses_a_text_of_too_many_tokens_with_a_message():
    at = page_app("tokens").run()
    at.text_area(key="tok_text").set_value("🍅👩‍🔬토" * 800).run()  # 4,000 characters, 11,200 tokens: 25 MB of chips
    assert not at.exception, at.exception
    assert "Text to tokenize is 11,200 tokens" in shown(at.error) and "at most 3,000" in shown(at.error)
    assert not any("chars per token" in df.value.columns for df in at.dataframe)
