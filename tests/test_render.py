from pipeline.render import axis_labels, html_text, piece_bytes, plotly_label, render_bytes


def test_visible_whitespace_and_bytes():
    assert render_bytes(b" the\n") == "␣the↵"
    assert render_bytes("토".encode()[:2]) == "<0xED><0x86>"
    assert render_bytes(b"\x00\x07") == "\\x00\\x07"
    assert piece_bytes("Ġí") == b" \xed"


def test_untrusted_text_is_escaped():
    evil = "<img src=x onerror=alert(1)><s>"
    assert "<" not in html_text(evil) and "<" not in plotly_label(evil)
    assert axis_labels(["a", "a"]) == ["(0)a", "(1)a"]
