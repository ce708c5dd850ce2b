"""Token text made readable (pipeline/text.py) and untrusted text made safe (ui/escape.py, ui/chips.py)."""
import html

from pipeline.stages.tokens import Token
from pipeline.text import piece_bytes, piece_text, plural, render_bytes, render_text, token_text, tokens_text
from ui.chips import chip, token_chips
from ui.escape import axis_labels, code_span, html_text, plotly_label


def test_visible_whitespace_and_bytes():
    assert render_bytes(b" the\n") == "␣the↵"
    assert render_bytes("토".encode()[:2]) == "<0xED><0x86>"
    assert render_bytes(b"\x00\x07") == "\\x00\\x07"
    assert render_bytes(b"ok\xffgo") == "ok<0xFF>go"  # valid runs decoded, the bad byte shown alone
    assert render_bytes("토".encode()) == "토"
    assert piece_bytes("Ġí") == b" \xed"
    assert piece_bytes("Ġtom") == b" tom" and piece_text("Ġtom") == "␣tom"
    assert piece_bytes("<|im_end|>") == b"<|im_end|>"  # not byte-level text: kept as UTF-8
    assert piece_bytes("a\ud800") == b"a\xed\xa0\x80"  # a lone surrogate keeps its (invalid) bytes...
    assert render_bytes(piece_bytes("a\ud800")) == "a<0xED><0xA0><0x80>"  # ...and shows as bytes


def test_render_text_escapes_invisible_characters():
    assert render_text("a\tb\r") == "a⇥b␍"
    assert render_text("\u200b\u202e") == "\\u200b\\u202e"  # zero-width space, right-to-left override
    assert render_text("\ud800") == "\\ud800"
    assert render_text("é🍅") == "é🍅"


def test_token_text_of_the_real_tokenizer(tokenizer):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    space_tom = tokenizer.convert_tokens_to_ids("Ġtom")
    assert token_text(tokenizer, eos) == "<|im_end|>"  # special tokens keep their name
    assert token_text(tokenizer, space_tom) == "␣tom"
    ids = tokenizer("토마토 <img> \n", add_special_tokens=False)["input_ids"] + [eos]
    assert tokens_text(tokenizer, ids) == [token_text(tokenizer, i) for i in ids]
    # concatenating the pieces' bytes gives the text back
    raw = b"".join(piece_bytes(p) for p in tokenizer.convert_ids_to_tokens(ids[:-1]))
    assert raw.decode() == "토마토 <img> \n"


def test_plural():
    assert plural(1, "token") == "1 token"
    assert plural(2, "token") == "2 tokens"
    assert plural(12_345, "entry", "entries") == "12,345 entries"


def test_untrusted_text_is_escaped():
    evil = "<img src=x onerror=alert(1)><s>"
    assert "<" not in html_text(evil) and "<" not in plotly_label(evil)
    assert html.unescape(html_text(evil)) == evil and html.unescape(plotly_label(evil)) == evil
    assert html_text("a'b\"c") == "a&#x27;b&quot;c"  # safe inside attributes too
    assert plotly_label("&lt;") == "&amp;lt;"  # an already-escaped look-alike stays literal
    assert axis_labels(["a", "a"]) == ["(0)a", "(1)a"]
    assert axis_labels(["<s>"]) == ["(0)&lt;s&gt;"]


def test_code_span_shows_backticks_literally():
    assert code_span("x") == "` x `"
    assert code_span("a`b") == "`` a`b ``"
    assert code_span("``") == "``` `` ```"


def test_chips_escape_token_text():
    evil = "<img src=x onerror=alert(1)>"
    out = chip(evil, 7, "user", False, title="it's <b>")
    assert "<img" not in out and "&lt;img" in out and "<b>" not in out and ">7</sub>" in out
    block = token_chips([Token(0, 5, evil, "user", False), Token(1, 2, "<|im_end|>", "template", True)])
    assert "<img" not in block and "&lt;|im_end|&gt;" in block and block.count("<span") == 2


def test_highlighted_text_keeps_one_html_block_whatever_the_line_breaks(tokenizer):
    """'\\r\\r' is a blank line to Markdown: left raw, it ended the HTML block and the rest was read as Markdown."""
    from markdown_links import foreign_links

    from pipeline.stages.template import Segment
    from pipeline.text import token_pieces
    from ui.chips import highlighted_template, text_spans

    hostile = "a\r\r[Log in](http://evil.example/login)\n\nb\r\n\r\nc"
    spans = text_spans(token_pieces(tokenizer, tokenizer(hostile)["input_ids"]))
    template = highlighted_template([Segment(hostile, "user", True)], [])
    for out in (spans, template):
        assert "\r" not in out and "\n" not in out
        assert not foreign_links(out), out
