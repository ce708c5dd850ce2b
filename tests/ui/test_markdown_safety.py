"""User text quoted in a Markdown message never becomes a link: ui.escape.markdown_text and
code_span, checked with a model of Streamlit's renderer (tests/markdown_links.py)."""
import html

from hypothesis import example, given, settings
from hypothesis import strategies as st
from kit.hypothesis_profiles import examples
from kit.markdown_links import HOSTILE, PHISH, foreign_links, links, shown
from markdown_it import MarkdownIt

from ui.escape import code_span, markdown_text


def test_the_renderer_model_finds_every_kind_of_link():
    """The checker itself: each hostile text, unescaped, is a foreign link (so the tests below can fail)."""
    for text in HOSTILE:
        assert foreign_links(text), text
    assert links("[ours](/journey?q=1) and `http://in.code`") == ["/journey?q=1"]
    assert not foreign_links("[ours](/journey?q=1)")


def test_markdown_text_leaves_no_link():
    for text in HOSTILE:
        assert not links(markdown_text(text)), text
        assert not links(f"The link's `seed` was not usable ({markdown_text(text)}); using the default 0."), text


def test_markdown_text_reads_as_typed():
    shown = MarkdownIt("commonmark").render(markdown_text(PHISH)).replace("\u2060", "")
    assert html.unescape(shown) == f"<p>{PHISH}</p>\n"
    assert markdown_text("a\nb*c*") == "a↵b\\*c\\*"


def test_code_span_line_breaks_do_not_end_it():
    assert not links(code_span("x\n\n[click](http://evil.example)"))
    assert code_span("a`b") == "`` a`b ``"


@settings(max_examples=examples(300))
@given(st.text(alphabet=st.sampled_from(list("[]()<>!:/.@`*_\\#-=|~$&; \n\tahtpswwexmio")), max_size=60))
@example(PHISH)
@example("x\n\n[click](http://evil.example)")
def test_no_text_becomes_a_link(text):
    assert not links(markdown_text(text))
    assert not links(code_span(text))


@settings(max_examples=examples(300))
@given(st.text(alphabet=st.sampled_from(list("[]()<>!:/.@`*_\\#-+=|~$&;1 ahtpswwexmio🍅토")), max_size=60))
@example("1. [x](http://e.com)")
@example("# &amp; $x$ ~~y~~")
def test_markdown_text_reads_exactly_as_typed(text):
    """Nothing is lost or added for the reader: the shown text is the typed text."""
    assert shown(markdown_text(text)) == text.strip()
