"""A tampered link or hostile text never plants a link under our name, and the grammars that
crashed the parsers are clear messages. Every page of app.py in AppTest with every query parameter
tampered; each element's Markdown is read by a model of Streamlit's renderer (tests/markdown_links.py)."""
import os
import re

import pytest
from kit.markdown_links import foreign_links
from kit.paths import app_page_table
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("tiny_app")  # AppTest on the tiny model (fast tier): links, not answers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PHISH = "[Session expired: log in again](http://evil.example/login)"
HOSTILE_TEXT = f"{PHISH} or www.evil.example, write to admin@evil.example"
TEXT_PARAMS = {"q": HOSTILE_TEXT, "system": HOSTILE_TEXT, "stop": PHISH,
               "history": f"user: {PHISH}\nassistant: {HOSTILE_TEXT}"}
MARKDOWN_FIELDS = ("body", "label", "help")  # the proto fields Streamlit draws as Markdown
PLAIN_TYPES = {"text", "code", "json", "exception"}  # drawn as text, never as Markdown


def pages() -> list[tuple[str, str]]:
    return [(file, url) for file, _, _, url, _ in app_page_table()]


def markdown_of(at: AppTest) -> list[tuple[str, str]]:
    """(element type, text) for every piece of Markdown on the page: bodies, labels, help, radio options."""
    out = []
    for node in at._tree:
        proto = getattr(node, "proto", None)
        kind = getattr(node, "type", "")
        if proto is None or kind in PLAIN_TYPES:
            continue
        for field, value in proto.ListFields():
            if field.name in MARKDOWN_FIELDS and isinstance(value, str):
                out.append((kind, value))
            if kind == "radio" and field.name == "options":
                out += [(kind, str(o.label) if hasattr(o, "label") else str(o)) for o in value]
            if field.name == "expandable" or field.name == "tab":  # blocks: an expander's or a tab's label
                out.append((field.name, value.label))
        if kind == "html" or getattr(proto, "allow_html", False):  # raw HTML: an <a> or <img> would be live
            out += [(kind, f"<{m}>") for m in re.findall(r"(?i)<(?:a|img)\b[^>]*>", getattr(proto, "body", ""))]
    return out


def planted_links(at: AppTest) -> list[tuple[str, str]]:
    return [(kind, link) for kind, text in markdown_of(at) for link in foreign_links(text)]


def tampered(page_params: dict) -> dict[str, str]:
    from views.links.url_state import REQUEST

    return {**{name: TEXT_PARAMS.get(name, PHISH) for name in REQUEST}, **{name: PHISH for name in page_params}}


@pytest.mark.parametrize("file,path", pages())
def test_no_tampered_parameter_plants_a_link(file, path):
    from views.links.url_state import CONTROLS

    params = tampered({})
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = dict(params)
    at.run()  # the Start page: the request's parameters are read here
    assert not at.exception, at.exception
    assert any("not usable" in w.value for w in at.warning), "the tampered request made no note"
    assert not planted_links(at), planted_links(at)
    if path != "start":
        at.switch_page(f"views/pages/{file}").run()  # the page declares its controls beside its widgets: their names
        params = tampered(at.session_state[CONTROLS] if CONTROLS in at.session_state else {})
        at.query_params = dict(params)
        at.session_state["_url_request_loaded"] = False  # read the request's parameters again on this page,
        at.session_state["_url_page_loaded"] = None  # arriving at it again with every control's value tampered
        at.run()
        assert not at.exception, at.exception
        assert not planted_links(at), planted_links(at)
    assert any("evil" in text for _, text in markdown_of(at)), "the hostile text was not shown at all"


@pytest.mark.parametrize("kind,spec", [("json_schema", "[" * 9_999 + "]" * 9_999),
                                       ("regex", "(" * 3_000 + ")" * 3_000), ("regex", "a{99999999999}"),
                                       ("json_schema", '{"type": "string", "pattern": "' + PHISH + '{99999999999}"}'),
                                       # the grammar engine echoes the schema's text in its error
                                       ("json_schema", '{"$ref": "#/definitions/' + PHISH + '"}')])
def test_grammars_that_crashed_or_are_refused_show_a_message(kind, spec):
    from kit.apptest import page_app

    at = page_app("constrained", req_max_new_tokens=4).run()
    at.radio(key="co_kind").set_value(kind).run()
    at.text_area(key=f"co_spec_{kind}").set_value(spec)
    next(b for b in at.button if "Decode" in b.label).click().run()
    assert not at.exception, at.exception
    assert any("Please fix the format" in e.value for e in at.error)
    assert not planted_links(at), planted_links(at)


@pytest.mark.parametrize("view,key,value", [
    ("what_if", "br_typed", "[Log in](http://evil.example/login)"),  # What-if: "type a token's text", 40 chars
    ("embeddings", "em_word", PHISH),  # the neighbours' word box
    ("embeddings", "em_words", f"{PHISH}, tomato, apple"),  # the PCA map's words
    ("embeddings", "em_a", "http://evil.example/x"),  # the analogy's words
])
def test_words_typed_into_a_page_are_quoted_without_a_link(view, key, value):
    from kit.apptest import page_app

    at = page_app(view, req_max_new_tokens=4).run()
    next(w for w in [*at.text_input, *at.text_area] if w.key == key).set_value(value).run()
    assert not at.exception, at.exception
    assert any("evil" in text for _, text in markdown_of(at)), "the typed text was not quoted"
    assert not planted_links(at), planted_links(at)
