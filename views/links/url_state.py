"""The view in the URL: the whole request and each page's own controls live in the query string,
both ways. Opening a link in a fresh browser restores the same request and the same controls;
changing a control rewrites the link. A tampered parameter falls back to its default with a note.

Widgets keep their own session-state keys (`req_question`, `at_layer`, ...); this module only
copies between those keys and query parameters: the request's have no dot (`q`, `top_k`), a page's
controls are declared beside its widgets (views/links/controls.py) with its page's prefix (`at.layer`, `nt.top_k`),
so the two never share a name.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import streamlit as st

from pipeline.core.errors import InputError
from pipeline.model.registry import CHAT_FORMATS
from pipeline.model.weight_formats import WEIGHT_FORMATS
from pipeline.stages.request import (
    MAX_MESSAGE_CHARS,
)
from ui.escape import markdown_text
from views.links.params import Param, _num, choice, logit_bias, model_name, option, text

REQUEST = {  # the sidebar's request: the same on every page
    "model": Param("req_model", model_name),  # restored before the others (restore_model): ranges follow the model
    "format": Param("req_prompt_format", choice(CHAT_FORMATS)),
    "weights": Param("req_weights", choice(WEIGHT_FORMATS)),
    "q": Param("req_question", text()),
    "system": Param("req_system", text()),
    "history": Param("req_history", text(MAX_MESSAGE_CHARS * 4)),
    "max_new_tokens": Param("req_max_new_tokens", option("max_new_tokens")),
    "temperature": Param("req_temperature", option("temperature"), _num),
    "top_k": Param("req_top_k", option("top_k")),
    "top_p": Param("req_top_p", option("top_p"), _num),
    "min_p": Param("req_min_p", option("min_p"), _num),
    "seed": Param("req_seed", option("seed")),
    "stop": Param("req_stop", text(400)),
    "repetition_penalty": Param("req_repetition_penalty", option("repetition_penalty"), _num),
    "presence_penalty": Param("req_presence_penalty", option("presence_penalty"), _num),
    "frequency_penalty": Param("req_frequency_penalty", option("frequency_penalty"), _num),
    "logit_bias": Param("req_logit_bias", logit_bias),
}

def restore_model(defaults: dict[str, Any]) -> list[str]:
    """Before the model is read: a request another page switched to (switch_request), and the link's
    model once per browser session. Returns notes about what was refused."""
    pending = st.session_state.pop("_url_pending_request", None)  # see switch_request
    if pending is not None:
        load_request(pending)
    if st.session_state.get("_url_model_loaded"):
        return []
    st.session_state["_url_model_loaded"] = True
    notes: list[str] = []
    return _apply({"model": REQUEST["model"]}, _link_query(notes), defaults, notes)


def _link_query(notes: list[str]) -> dict[str, str]:
    """The query parameters, a short link's stored ones under them (a note if it is not known)."""
    query = {name: st.query_params[name] for name in st.query_params}
    if "link" in query:  # a short link: the server stored the query string it stands for
        from pipeline.server.room import room_store

        stored = room_store().link(query.pop("link"))
        if stored is None:
            notes.append("The short link is not known on this server; opening the default view.")
        query = {**(stored or {}), **query}
    return query


ARRIVAL = "_url_arrival"  # session key: the link's parameters for the page's own controls, not yet applied
CONTROLS = "_link_controls"  # session key: {link name: Param} of the page drawn, as views/links/controls.py declared
LEFT_OUT = "_link_left_out"  # session key: {widget key: why it is not in links} of the page drawn


def restore(page: str, defaults: dict[str, Any]) -> list[str]:
    """Copy query parameters into session state: the request once per browser session (the model is
    restore_model's). On arrival at a page, its link's other parameters wait for the page's controls, each applied
    as the page declares it (take_arrival). Returns notes about refused parameters."""
    notes: list[str] = []
    wanted = {}
    if not st.session_state.get("_url_request_loaded"):
        st.session_state["_url_request_loaded"] = True
        wanted.update({name: p for name, p in REQUEST.items() if name != "model"})
    arriving = st.session_state.get("_url_page_loaded") != page
    query = _link_query(notes) if wanted or arriving else {}
    if arriving:
        st.session_state.update({"_url_page_loaded": page, CONTROLS: {}, LEFT_OUT: {},
                                 ARRIVAL: {k: v for k, v in query.items() if k not in REQUEST}})
    return _apply(wanted, query, defaults, notes)


def take_arrival(name: str, param: Param, older: tuple[str, ...] = ()) -> bool:
    """Apply the link's value for a control the page declares now (under `name`, or a name older links used, never
    the request's), once per arrival at the page; a value that does not parse is said in a note here. Returns whether
    the link set it."""
    arrival = st.session_state.get(ARRIVAL) or {}
    said = next((n for n in (name, *older) if n in arrival and (n == name or n not in REQUEST)), None)
    if said is None:
        return False
    raw = arrival[said]
    for n in {name, *older} - set(REQUEST):  # answered once
        arrival.pop(n, None)
    try:
        st.session_state[param.key] = param.parse(raw)
    except (ValueError, TypeError, InputError) as e:
        st.warning(f"The link's `{said}` was not usable ({markdown_text(e)}); ignored.", icon="🔗")
        return False
    return True


def keep_offered(key: str, options) -> None:
    """A multiselect whose options follow the device: values from a link that it does not offer here are dropped
    before it is drawn (Streamlit refuses them), and it shows its default if none is left."""
    value = st.session_state.get(key)
    if value is not None and not set(value) <= set(options):
        kept = [v for v in value if v in options]
        if kept:
            st.session_state[key] = kept
        else:
            del st.session_state[key]


def keep_in_range(key: str, lo, hi) -> None:
    """A slider whose range follows the run: a value from a link or an earlier run outside [lo, hi] is
    dropped before the slider is drawn (Streamlit refuses a value past its ends), so it shows its default."""
    value = st.session_state.get(key)
    if value is not None and not lo <= value <= hi:
        del st.session_state[key]


def _apply(wanted: dict[str, Param], query: dict[str, str], defaults: dict[str, Any], notes: list[str]) -> list[str]:
    """Each wanted parameter the query has into session state, or its default with a note."""
    for name, param in wanted.items():
        if name not in query:
            continue
        raw = query[name]
        try:
            st.session_state[param.key] = param.parse(raw)
        except (ValueError, TypeError, InputError) as e:
            fallback = defaults.get(param.key)
            if fallback is not None:
                st.session_state[param.key] = fallback
            notes.append(f"The link's `{name}` was not usable ({markdown_text(e)}); "
                         + (f"using the default {fallback!r}." if fallback is not None else "ignored."))
    return notes


def _request_defaults() -> dict[str, Any]:
    from views.request.session import DEFAULTS

    return {f"req_{k}": v for k, v in DEFAULTS.items()}


def request_params() -> dict[str, str]:
    """The sidebar's request as query parameters, defaults left out (for links made on a page)."""
    return request_query(_request_defaults())


def request_fields(query: dict[str, str]) -> dict[str, Any]:
    """The request these query parameters describe, as the sidebar's session keys (`req_model`, ...) and values:
    each read by its link parser, the model and its weights first (the other fields' ranges follow that model); an
    absent or unusable one is its default. Writes nothing: load_request and a lesson's stages (views/server/
    lesson_runs.py) both read a query through it."""
    from views.server.state import using_model  # a model's files only: its dimensions are known before it loads

    defaults = _request_defaults()

    def read(name: str, param: Param):
        try:
            return param.parse(query[name]) if name in query else defaults[param.key]
        except (ValueError, TypeError, InputError):
            return defaults[param.key]
    fields = {REQUEST[name].key: read(name, REQUEST[name]) for name in ("model", "weights")}
    with using_model(fields["req_model"], fields["req_weights"]):
        return {param.key: fields[param.key] if param.key in fields else read(name, param)
                for name, param in REQUEST.items()}


def load_request(query: dict[str, str]) -> None:
    """Make the sidebar's request the one these query parameters describe (absent or unusable: default)."""
    st.session_state.update(request_fields(query))


def switch_request(query: dict[str, str]) -> None:
    """Make the request the one these parameters describe. The sidebar's widgets cannot change once
    drawn, so with a sidebar (app.py) the page runs again and `restore` applies it before them."""
    if st.session_state.get("_url_view") is None:  # AppTest runs one page alone: no sidebar drawn
        load_request(query)
        return
    st.session_state["_url_pending_request"] = query
    st.rerun()


def request_query(defaults: dict[str, Any]) -> dict[str, str]:
    """The sidebar's request as query parameters (defaults left out), for links to other pages."""
    return {name: p.show(st.session_state[p.key]) for name, p in REQUEST.items()
            if p.key in st.session_state and st.session_state[p.key] != defaults.get(p.key)}


def write(defaults: dict[str, Any]) -> None:
    """The current request and this page's controls into the query string (request defaults left out). A page
    control's link value not yet applied (the page has not declared it yet: before the page runs) is kept as the
    link wrote it."""
    params = {name: raw for name, raw in (st.session_state.get(ARRIVAL) or {}).items() if "." in name}
    for name, param in {**REQUEST, **st.session_state.get(CONTROLS, {})}.items():
        if param.key in st.session_state and not param.private:
            value = st.session_state[param.key]  # None: a picker left at "nothing", its default
            if value is not None and (param.key not in defaults or value != defaults[param.key]):
                params[name] = param.show(value)
    # Always sent: after a page switch the browser's address has lost its query string even where
    # the server's copy still holds it, so comparing the two would skip the write.
    st.query_params.from_dict(params)


def bind(page: str, defaults: dict[str, Any]) -> None:
    """Remember this page and the request's defaults for `sync` (a fragment's rerun does not run app.py)."""
    st.session_state["_url_view"] = (page, defaults)


def share_box(slot) -> None:
    """The sidebar's place for the link (an st.empty made before the page runs, so that a fragment
    may fill it: Streamlit keeps a fragment's place in an outer container from the full run)."""
    st.session_state["_url_slot"] = slot


def sync() -> None:
    """The address bar and the share box follow the controls. app.py calls it before the page runs (a reload
    during a long run then keeps the request that started it) and after; every fragment that holds controls calls it
    at its end (a fragment's rerun does not reach app.py). Each write replaces the page's history entry
    (ui/history_entries.py): Back goes to the page before, not to this page's older address."""
    view = st.session_state.get("_url_view")
    if view is None:  # AppTest runs one page file alone, without app.py
        return
    page, defaults = view
    write(defaults)
    slot = st.session_state.get("_url_slot")
    if slot is not None:
        slot.code(link(page), language=None, wrap_lines=True)


def link(page: str) -> str:
    """The full link to this view, for the copy box (st.context.url is the page's address)."""
    base = st.context.url.split("?")[0] if st.context.url else f"/{page}"
    query = urlencode(dict(st.query_params))
    return base + (f"?{query}" if query else "")
