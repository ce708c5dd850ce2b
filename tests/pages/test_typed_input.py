"""Hostile input typed into the app's boxes, or put in a link: a clear message naming the box or the link's
parameter, and no error box. A token id of thousands of digits (Python's int() refuses more than 4,300 with its
own words), words and texts past a box's limit, lone surrogates. On the tiny model (fixture `tiny_app`, fast tier);
what the browser does with a lone surrogate is tests/browser/test_browser.py's."""
import os

import pytest
from kit.apptest import page_app
from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("tiny_app")

HUGE_ID = "1" * 4_301  # one digit past what int() reads


def shown(elements) -> str:
    """What these elements say to the reader (their Markdown escapes resolved)."""
    from kit.markdown_links import shown as resolved

    return " ".join(resolved(e.value) for e in elements)


def app() -> AppTest:
    return AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)


def test_a_logit_bias_token_id_of_thousands_of_digits_in_the_sidebar_is_a_message_on_every_page():
    at = app()
    at.session_state["req_logit_bias"] = f"{HUGE_ID}:5"
    at.run()  # the Start page: the sidebar's run of the request is looked up for the downloads
    assert not at.exception, at.exception
    at.switch_page("views/pages/journey.py").run()
    assert not at.exception, at.exception
    said = shown(at.error)
    assert "logit_bias" in said and "4,301 characters" in said, said


@pytest.mark.parametrize("name,value", [("logit_bias", f"{HUGE_ID}:5"), ("seed", "9" * 5_000),
                                        ("top_k", "7" * 5_000), ("temperature", "1" * 5_000)])
def test_a_link_with_a_number_of_thousands_of_digits_falls_back_with_a_note_in_our_words(name, value):
    at = app()
    at.query_params = {name: value}
    at.run()
    assert not at.exception, at.exception
    note = next(w for w in shown(at.warning).split("The link's ") if w.startswith(f"{name} "))
    assert "not usable" in note and "using the default" in note, note
    assert "int_max_str_digits" not in note and "Exceeds the limit" not in note, note  # not Python's words
    at.switch_page("views/pages/journey.py").run()
    assert not at.exception, at.exception


def embeddings_page(**state) -> AppTest:
    at = page_app("embeddings", **state).run()
    assert not at.exception, at.exception
    return at


def page_still_works(at: AppTest) -> None:
    """The embeddings page's other parts are drawn: the rows' heatmap, the neighbours' and the analogy's tables."""
    assert [c.key for c in at.get("plotly_chart")][0] == "em_heatmap"
    assert len(at.dataframe) == 2


def test_a_word_over_200_characters_is_cut_with_a_note_and_the_page_works():
    at = embeddings_page()
    at.text_input(key="em_word").set_value("tomato" * 40).run()  # 240 characters
    assert not at.exception, at.exception
    assert "word takes at most 200 characters" in shown(at.info)
    assert "em_pca" in [c.key for c in at.get("plotly_chart")]
    page_still_works(at)


def test_a_word_list_over_64000_characters_is_cut_with_a_note_and_the_page_works():
    at = embeddings_page()
    at.text_area(key="em_words").set_value("tomato, apple, banana, " * 3_000).run()  # 69,000 characters
    assert not at.exception, at.exception
    assert "words (comma or line separated) takes at most 64,000 characters" in shown(at.info)
    assert "em_pca" in [c.key for c in at.get("plotly_chart")]  # the map of the list's first words
    page_still_works(at)


def test_a_word_over_200_characters_in_the_list_is_named_and_the_rest_of_the_page_works():
    at = embeddings_page()
    at.text_area(key="em_words").set_value("tomato, " + "a" * 201 + ", apple").run()
    assert not at.exception, at.exception
    said = shown(at.error)
    assert "Please fix words (comma or line separated)" in said and "at most 200" in said, said
    assert "em_pca" not in [c.key for c in at.get("plotly_chart")]
    page_still_works(at)


def test_the_tokens_page_cuts_a_long_text_at_its_limit_with_a_note():
    at = page_app("tokens").run()
    text = "Are tomatoes fruit? " * 3_500  # 70,000 characters: 244 s of one core before the limit
    at.text_area(key="tok_text").set_value(text).run()
    assert not at.exception, at.exception
    assert "Text to tokenize takes at most 4,000 characters" in shown(at.info)
    table = next(df.value for df in at.dataframe if "chars per token" in df.value.columns)
    tokens, per_token = table.iloc[0]["tokens"], table.iloc[0]["chars per token"]
    assert tokens * per_token == pytest.approx(4_000, rel=0.01)  # the table counts the text as cut


def page_scripts(at: AppTest) -> list[str]:
    """The HTML the page puts in with JavaScript allowed (st.html(..., unsafe_allow_javascript=True))."""
    return [h.proto.body for h in at.get("html") if h.proto.unsafe_allow_javascript]


def test_every_page_carries_the_script_that_removes_lone_surrogates_in_the_browser():
    """A lone surrogate never reaches the server: Streamlit's frontend writes it as bytes that are not UTF-8, the
    server refuses the message and closes the connection (the edit was lost without a word), and a page setting
    one in session state fails inside st.text_input. So the browser removes it, and says so naming the box
    (ui/text_guard.py; what it does there is tests/browser/test_browser.py's)."""
    from ui.text_guard import SCRIPT

    at = app().run()
    assert not at.exception and SCRIPT in page_scripts(at)
    at.switch_page("views/pages/tokens.py").run()
    assert not at.exception and SCRIPT in page_scripts(at)


def test_the_tensors_page_cuts_another_users_question_and_draws_a_window_of_a_long_batch():
    """A 5,000-digit question made a batch 5,000 tokens wide: its tables' cells, each styled on the server, kept a
    core busy for a minute (a long prompt of the sidebar's, 3,500 tokens, two)."""
    at = page_app("tensors").run()
    at.text_input(key="batch_q2").set_value("9" * 5_000).run()
    assert not at.exception, at.exception
    assert "Second user's question takes at most 1,000 characters" in shown(at.info)
    assert [df.value.shape for df in at.dataframe][-3:] == [(3, 64)] * 3  # the batch's three tensors
    at.slider(key="batch_from").set_value(900).run()  # the window's start, near the end of the batch
    assert not at.exception, at.exception
    assert at.dataframe[-1].value.columns[0] == "900"
    at.text_input(key="batch_q2").set_value("9" * 100).run()  # a narrower batch: the window starts again
    assert not at.exception, at.exception
    assert at.dataframe[-1].value.columns[0] == "0"


def test_the_tokens_page_refuses_a_text_of_too_many_tokens_with_a_message():
    at = page_app("tokens").run()
    at.text_area(key="tok_text").set_value("🍅👩‍🔬토" * 800).run()  # 4,000 characters, 11,200 tokens: 25 MB of chips
    assert not at.exception, at.exception
    assert "Text to tokenize is 11,200 tokens" in shown(at.error) and "at most 3,000" in shown(at.error)
    assert not any("chars per token" in df.value.columns for df in at.dataframe)
