"""The Embeddings page: the prompt's rows are the embedding table's, a word's neighbours, words typed in escaped.
AppTest runs the page file on its own (no app.py sidebar), from the session-state defaults in
views/request/session.py, on the tiny random-weight model (fixture `tiny_app`, fast tier); also on the real model
(marker `app`).
"""
import numpy as np
import pytest
from kit.apptest import chart, chart_data, page_app, page_text, plotly_count, run_page, shown
from kit.tiny_models import prompt_ids
from kit.tolerance import U32, assert_within
from streamlit.testing.v1 import AppTest


def test_embeddings_page(page_lm):
    at = run_page("embeddings")
    assert at.title[0].value == "Embeddings"
    assert plotly_count(at) == 2  # rows heatmap + PCA map
    assert len(at.dataframe) == 2  # neighbours + analogy
    assert at.dataframe[0].value["token"].iloc[0] == "␣tomato"  # the word is its own nearest neighbour
    ids = prompt_ids(page_lm)
    rows = np.asarray(chart_data(chart(at, "em_heatmap"))[0]["z"], dtype=float)  # the prompt's rows, in order
    table = page_lm.model.get_input_embeddings().weight.detach().cpu().numpy()
    want = table[ids[:len(rows)]]  # a lookup: the same values, at most the chart's float32 rounding apart
    assert_within(rows, want, U32 * np.abs(want), "embedding rows")
    at.text_input(key="em_word").set_value("Solanaceae").run()
    assert not at.exception and "mean of their rows" in page_text(at)
    at.text_area(key="em_words").set_value("cat, dog, <s>, <img src=x onerror=alert(1)>").run()
    assert not at.exception
    assert "&lt;img" in str(at.get("plotly_chart")[1].proto)  # escaped for plotly


def embeddings_page(**state) -> AppTest:
    at = page_app("embeddings", **state).run()
    assert not at.exception, at.exception
    return at


def page_still_works(at: AppTest) -> None:
    """The embeddings page's other parts are drawn: the rows' heatmap, the neighbours' and the analogy's tables."""
    assert [c.key for c in at.get("plotly_chart")][0] == "em_heatmap"
    assert len(at.dataframe) == 2


@pytest.mark.usefixtures("tiny_app")  # the typed words' checks, not the answer
def test_a_word_over_200_characters_is_cut_with_a_note_and_the_page_works():
    at = embeddings_page()
    at.text_input(key="em_word").set_value("tomato" * 40).run()  # 240 characters
    assert not at.exception, at.exception
    assert "word takes at most 200 characters" in shown(at.info)
    assert "em_pca" in [c.key for c in at.get("plotly_chart")]
    page_still_works(at)


@pytest.mark.usefixtures("tiny_app")  # the typed words' checks, not the answer
def test_a_word_list_over_64000_characters_is_cut_with_a_note_and_the_page_works():
    at = embeddings_page()
    at.text_area(key="em_words").set_value("tomato, apple, banana, " * 3_000).run()  # 69,000 characters
    assert not at.exception, at.exception
    assert "words (comma or line separated) takes at most 64,000 characters" in shown(at.info)
    assert "em_pca" in [c.key for c in at.get("plotly_chart")]  # the map of the list's first words
    page_still_works(at)


@pytest.mark.usefixtures("tiny_app")  # the typed words' checks, not the answer
def test_a_word_over_200_characters_in_the_list_is_named_and_the_rest_of_the_page_works():
    at = embeddings_page()
    at.text_area(key="em_words").set_value("tomato, " + "a" * 201 + ", apple").run()
    assert not at.exception, at.exception
    said = shown(at.error)
    assert "Please fix words (comma or line separated)" in said and "at most 200" in said, said
    assert "em_pca" not in [c.key for c in at.get("plotly_chart")]
    page_still_works(at)
