"""The request's link parameters: numbers checked, ranges that follow the model, text refused as a request would be.
"""

import pytest

from pipeline.core.errors import InputError


# ---- links --------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, ok", [("0.7", True), ("abc", False), ("nan", False), ("3", False), ("-1", False)])
def test_link_numbers_are_checked(raw, ok):
    from views.links.url_state import REQUEST

    parse = REQUEST["temperature"].parse
    if ok:
        assert parse(raw) == 0.7
    else:
        with pytest.raises((ValueError, InputError)):
            parse(raw)


def test_a_links_top_k_goes_up_to_the_models_vocabulary(monkeypatch):
    """top-k's top is the model's vocabulary size, not SmolLM2's 49,152 written down: Gemma 3 has 262,144."""
    from views.links import params as link_params
    from views.links import url_state

    monkeypatch.setattr(link_params, "_vocab_size", lambda: 262_144)
    for param in (url_state.REQUEST["top_k"], link_params.Param("nt_top_k", link_params.option("top_k"))):
        assert param.parse("262144") == 262_144 and param.parse("0") == 0
        with pytest.raises(ValueError):
            param.parse("262145")
    monkeypatch.setattr(link_params, "_vocab_size", lambda: 100)
    with pytest.raises(ValueError):
        url_state.REQUEST["top_k"].parse("101")


def test_link_text_refuses_what_a_request_would():
    from views.links.url_state import REQUEST

    assert REQUEST["q"].parse("<b>hi</b>") == "<b>hi</b>"  # kept as text; the pages escape it
    with pytest.raises(InputError):
        REQUEST["q"].parse("x" * 100_000)
