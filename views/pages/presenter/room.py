"""Presenter mode's room: making one, taking it up again from this browser's key, watching it move, and the links
that learners follow (a QR code for the projector)."""
import io
import os
from urllib.parse import urlencode

import segno
import streamlit as st

from pipeline.server import room as rooms  # rooms.room_store() read at each call (a test stands a store in for it)
from pipeline.server.room import PUBLIC_URL_ENV, RoomRefused, new_driver_id, public_base
from views.links import url_state
from views.pages.presenter import room_key

FOLLOW_EVERY_ENV = "TPE_FOLLOW_EVERY_S"  # a shorter poll, for tests: their browser servers (tests/kit/browser.py)


def follow_every_s() -> float:
    """How often a page in a room checks the presenter's stage: 3 s (a small file read), or TPE_FOLLOW_EVERY_S
    seconds where that is a number from 0.1 to 60."""
    try:
        given = float(os.environ.get(FOLLOW_EVERY_ENV, ""))
    except ValueError:
        return 3.0
    return given if 0.1 <= given <= 60 else 3.0


FOLLOW_EVERY_S = follow_every_s()  # read once, when the page's module is first imported by the server
LONG_LINK = 300  # characters: a longer learner link is given as a short link the server resolves


@st.fragment(run_every=FOLLOW_EVERY_S)
def watch_room(code: str, shown) -> None:
    """Both screens: when the room moves (stage, request, or who moved it) or goes, draw the page again. A learner's
    page turns with the presenter's; a presenter's page notices a move made elsewhere with its key. Each poll tells the
    store the room is seen, which keeps it (a touch of its file at most once a minute)."""
    now = rooms.room_store().room(code, seen=True)
    if (None if now is None else (now["stage"], now["query"], now["driver"])) != shown:
        st.rerun()


def room_state(room: dict | None):
    return None if room is None else (room["stage"], room["query"], room["driver"])


def start_presenting(stages: int) -> None:
    """The Start button's callback: the server makes a room at this stage of this request, with a key that this
    session (and, for reloads, this browser's cookie) holds. A room is made only here, never by a visit."""
    ss = st.session_state
    ss.setdefault("pr_driver", new_driver_id())
    stage, params = min(max(int(ss.get("pr_stage", 1)), 1), stages), url_state.request_params()
    try:
        code, key, _ = rooms.room_store().create_room(stage, params, ss.pr_driver, client=st.context.ip_address or "")
    except RoomRefused as e:
        ss.pr_refused = str(e)
        return
    ss.pr_room, ss.pr_key, ss.pr_sent = code, key, (stage, params)


def go_on_presenting(code: str, key: str) -> None:
    st.session_state.update(pr_room=code, pr_key=key, pr_adopt=True)


def present() -> str | None:
    """This session's room when it holds the key of a room the server keeps, else None (not presenting yet)."""
    ss = st.session_state
    ss.setdefault("pr_driver", new_driver_id())
    code, key = ss.get("pr_room"), ss.get("pr_key")
    store = rooms.room_store()
    if code and key and store.may_drive(code, key):
        return code
    if code and key and store.files.problem:  # the room's Redis away: the room may well be there, the key is kept
        st.warning(f"The room store does not answer now ({store.files.where}), so room {code} cannot be shown yet. "
                   "This screen keeps its key and tries again at your next step or a reload; Start presenting would "
                   "make another room.", icon="🔌")
        return None
    if code and key:
        st.warning(f"This presenter link does not open room {code} (its key is not that room's, or this server "
                   "no longer keeps the room). Start presenting makes a new room of your own.", icon="🔑")
        room_key.forget_key(code)
        ss.pop("pr_room", None)
        ss.pop("pr_key", None)
    return None


def not_presenting_yet(stages: int) -> None:
    """Before the Start button: the walk works, no room exists; a room this browser presented offers to go on."""
    refused = st.session_state.pop("pr_refused", None)
    if refused:
        st.error(f"No new room now: {refused}", icon="🚫")
    c1, c2 = st.columns([3, 2])
    c1.button("Start presenting: make a room learners can follow", key="pr_start", type="primary",
              on_click=start_presenting, args=(stages,), width="stretch")
    for code, key in room_key.kept_rooms():
        if rooms.room_store().may_drive(code, key):
            c2.button(f"Go on presenting room {code}", key=f"pr_resume_{code}", on_click=go_on_presenting,
                      args=(code, key), width="stretch")


def qr_png(link: str) -> bytes | None:
    """The link as a QR code (PNG), or None when it is too long for any QR code."""
    try:
        code = segno.make(link, error="m")
    except segno.DataOverflowError:
        return None
    png = io.BytesIO()
    code.save(png, kind="png", scale=6, border=2)
    return png.getvalue()


def learner_links(room: str | None, presenting: bool, stage: int) -> None:
    """Links for learners, by the address the room reaches: one that follows the presenter, and one to
    explore the same request alone (a short link when the request would make it too long). Before the room exists
    (nothing started yet), only the second."""
    base, note = public_base(st.context.url or "", st.get_option("server.address") or "",
                             os.environ.get(PUBLIC_URL_ENV))
    params = url_state.request_params()
    journey = f"{base}/journey" + (f"?{urlencode(params)}" if params else "")
    short = rooms.room_store().put_link(params) if len(journey) > LONG_LINK else None
    if short is not None:
        journey = f"{base}/journey?link={short}"
    c1, c2 = st.columns([3, 1])
    if room:
        follow = f"{base}/presenter?follow={room}"
        c1.markdown(f"**Follow along on your own laptop** (room {room}) — this page turns with the presenter's:")
        c1.code(follow, language=None, wrap_lines=True)
        png = qr_png(follow)
        if png is None:
            c2.caption("This address is too long for a QR code: type the link instead.")
        else:
            c2.image(png, caption="the follow-along link as a QR code", width=220)
    else:
        c1.markdown("**Start presenting** (the button above) to give learners a link and a QR code that follow "
                    "your screen.")
    c1.markdown("Or explore the same request on your own:")
    c1.code(journey, language=None, wrap_lines=True)
    if note:
        st.warning(note, icon="📡")
    if presenting:
        with st.expander("Your presenter link: keep it private, do not project it", icon="🔑"):
            st.caption(f"This browser keeps your right to move room {room}: a reload or a second tab here still "
                       "presents. To present from another computer, open this link there (it carries the key; that "
                       "browser then keeps it too). Anyone holding it can turn your learners' pages (this screen "
                       "tells you if someone does).")
            private = {**params, "room": room, "key": st.session_state.pr_key, "stage": stage}
            st.code(f"{base}/presenter?{urlencode(private)}", language=None, wrap_lines=True)
