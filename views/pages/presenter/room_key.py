"""The presenter's key kept by the presenter's browser, so that a reload (F5, a restarted browser, a laptop waking up)
or a second tab of the same browser still drives the room, without the key in the address or on the screen.

The choice: a cookie per room, `tpe_presenter_<code>=<key>` (path /, SameSite=Strict, 12 hours, Secure over https),
written by a small script of ours when the page presents, and read by the server from the websocket's opening
request (`st.context.cookies`) when a page opens `?room=CODE` without a key. Why not the other options:
- An HttpOnly cookie would keep the key from scripts, but it can only be set by an HTTP response header, and
  Streamlit 1.67 gives a page no response of its own (a page talks over the websocket after the first HTML).
- localStorage would need a component that reads it and sends it back: one more round trip and rerun on every
  arrival, and a component's value arrives after the page's first run. A cookie is in the opening request itself,
  so the first run already knows the presenter.
A script on this origin can read the cookie, as it could localStorage; pages escape all token text, and the key only
moves the room's stage (it reaches nothing else). A browser that never presented (a learner's) holds no such cookie,
so `?room=CODE` there follows the room, as before.
"""
import json

import streamlit as st

from pipeline.server.room import CODE, KEY

PREFIX = "tpe_presenter_"
KEEP_S = 12 * 3600  # a day's workshop; each page run while presenting writes it again


def kept_key(code: str) -> str | None:
    """The key this browser keeps for room `code`, as its cookie came with this session's opening request."""
    key = st.context.cookies.get(PREFIX + code) if CODE.fullmatch(code or "") else None
    return key if isinstance(key, str) and KEY.fullmatch(key) else None


def kept_rooms() -> list[tuple[str, str]]:
    """(code, key) of every room this browser keeps a key for (a bare /presenter offers to go on with one)."""
    out = []
    for name, value in st.context.cookies.to_dict().items():
        code = name[len(PREFIX):] if name.startswith(PREFIX) else ""
        if CODE.fullmatch(code) and isinstance(value, str) and KEY.fullmatch(value):
            out.append((code, value))
    return out


def keep_key(code: str, key: str) -> None:
    """Have this browser keep the key of room `code` (a script of ours: a code and a key of checked letters only)."""
    if not (CODE.fullmatch(code or "") and KEY.fullmatch(key or "")):
        return
    cookie = json.dumps(f"{PREFIX}{code}={key}; path=/; max-age={KEEP_S}; samesite=strict")
    st.html(f"<script>document.cookie = {cookie} + (location.protocol === 'https:' ? '; secure' : '');</script>",
            unsafe_allow_javascript=True)


def forget_key(code: str) -> None:
    """The browser drops its key of room `code` (a room the server no longer keeps)."""
    if CODE.fullmatch(code or ""):
        st.html(f"<script>document.cookie = {json.dumps(PREFIX + code + '=; path=/; max-age=0')};</script>",
                unsafe_allow_javascript=True)
