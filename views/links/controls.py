"""A page's controls in its link, declared where the page draws them: `linked` makes the widget and puts its key in
the link, with the parser that reads a link's text back (views/links/params.py); url_state.py collects them.

    top_p = linked(c[2].slider, "nt_top_p", option("top_p"), "top-p", **slider_args(r["top_p"]))
    left_out(st.file_uploader, "ca_file", "an uploaded file cannot travel in a link", "Your log")

A control's link name is its key with the page's prefix then a dot: `nt_top_k` is `nt.top_k`, `ly_lens_end` is
`ly.lens_end`. The request's names have no dot (`top_k`), so the two never share one: a Next token link carries the
request's top-k and the page's own side by side. The presenter's room names (`room`, `key`, `follow`, `stage`) are
given as they are: they are printed as QR codes and in docs.

A link's value for a control is applied when the control is declared, once per arrival at the page (so a range that
follows the run is the page's own), and a value that does not parse is said there, in a note beside the control.
Ranges that depend on the run (a step, a token's position) are kept by the page when it draws
(url_state.keep_in_range), and options that depend on the device likewise (url_state.keep_offered).
"""
from __future__ import annotations

from typing import Any, Callable

import streamlit as st

from views.links import url_state
from views.links.params import Param, shown_by


def link_name(key: str) -> str:
    """A widget key -> its link parameter: `why_ab_layer` -> `why.ab_layer`."""
    prefix, _, rest = key.partition("_")
    return f"{prefix}.{rest}"


def declare(key: str, parse: Callable[[str], Any], name: str | None = None, older: tuple[str, ...] = (),
            private: bool = False, widget: str | None = None) -> bool:
    """Put session key `key` in this page's link under `name` (default: link_name(key)), read back by `parse`;
    `older`: names older links used for it. A link's value is applied now, once per arrival at the page. Returns
    whether it was (for a control the page resets for each run, or a picker keyed by its run: `widget`)."""
    name = name or link_name(key)
    if name in url_state.REQUEST:
        raise ValueError(f"{name!r} is the request's parameter: a page's control is named `prefix.key`")
    param = Param(key, parse, shown_by(parse), private, widget)
    st.session_state.setdefault(url_state.CONTROLS, {})[name] = param
    return url_state.take_arrival(name, param, older)


def linked(widget: Callable, key: str, parse: Callable[[str], Any], *args, name: str | None = None,
           older: tuple[str, ...] = (), private: bool = False, within: tuple | None = None, offered=None, **kwargs):
    """`widget(*args, key=key, **kwargs)` (st.slider, a column's selectbox, ...), its value in this page's link
    (`declare`). `within`: (lo, hi) that this run allows, `offered`: the options this device offers; a value
    outside them (a link's, an earlier run's) is dropped before the widget is drawn. Returns the widget's value."""
    declare(key, parse, name, older, private)
    if within is not None:
        url_state.keep_in_range(key, *within)
    if offered is not None:
        url_state.keep_offered(key, offered)
    return widget(*args, key=key, **kwargs)


def left_out(widget: Callable, key: str, why: str, *args, **kwargs):
    """`widget(*args, key=key, **kwargs)`, a control deliberately not in links, `why` said beside it."""
    st.session_state.setdefault(url_state.LEFT_OUT, {})[key] = why
    return widget(*args, key=key, **kwargs)

