"""Presenter mode with a lesson (`./run.sh app --lesson FILE`): the room starts at the lesson's first stage and the
presenter moves through its stages; each stage brings its request to the room (learners following get it too), the
presenter's screen that shows its page, what to say, its poll's question with a button that opens it in the room,
and a link to the page with its controls. The stages' runs were prepared when the server started
(views/server/lesson_runs.py): their progress is shown here."""
from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from pipeline.core.poll_kinds import kind_name
from pipeline.lessons.lesson import Lesson
from pipeline.server.room import room_store
from ui.escape import markdown_text
from views.chrome.frame import stage_link
from views.chrome.page_list import page_at
from views.links import url_state
from views.pages.presenter.stages import screen_of
from views.server.lesson_runs import LessonRuns, lesson_runs


def go_to_stage(n: int) -> None:
    """Lesson stage n (0-based): its request becomes the room's (the page runs again with it), its screen is shown."""
    runs = lesson_runs()
    stage = runs.lesson.stages[n]
    ss = st.session_state
    ss.ls_stage = n
    screen = screen_of(page_at(stage.page).script, stage.controls)
    if screen is not None:
        ss.pr_stage = screen
    url_state.switch_request(stage.request)  # the sidebar's defaults for what the stage leaves out


def lesson_controls(screen: int) -> dict[str, str]:
    """The link controls of the lesson's current stage where presenter screen `screen` (1-based) is the one that
    shows it (a section's screen reads them: "Many answers at once" draws the stage's samples); else none."""
    runs = lesson_runs()
    n = st.session_state.get("ls_stage")
    if runs is None or runs.lesson is None or n is None or not 0 <= int(n) < len(runs.lesson.stages):
        return {}
    stage = runs.lesson.stages[int(n)]
    return dict(stage.controls) if screen_of(page_at(stage.page).script, stage.controls) == screen else {}


def start_lesson() -> None:
    """Before the screen is drawn: a presenter's first visit starts the room at the lesson's first stage; a presenter
    taking up a room again (a reload, a second tab, the private link) keeps where the room is, and the lesson's
    stage is the one the room shows (lesson_stage_of), so its controls and its panel are that stage's."""
    runs = lesson_runs()
    ss = st.session_state
    if runs is None or runs.lesson is None or "ls_stage" in ss:
        return
    room = room_store().room(ss["pr_room"]) if ss.get("pr_room") else None
    if room is not None:
        ss.ls_stage = lesson_stage_of(runs.lesson, int(room["stage"]), room["query"])
        return
    go_to_stage(0)


def lesson_stage_of(lesson: Lesson, screen: int, query: dict[str, str]) -> int:
    """The lesson stage (0-based) a room at presenter screen `screen` with link parameters `query` shows: the first
    on that screen whose own parameters (request and controls) are all in the room's query, else the first on that
    screen, else the lesson's first."""
    on_screen = [i for i, s in enumerate(lesson.stages) if screen_of(page_at(s.page).script, s.controls) == screen]
    shown = [i for i in on_screen if all(query.get(k) == v for k, v in lesson.stages[i].query().items())]
    return (shown or on_screen or [0])[0]


def progress(runs: LessonRuns) -> None:
    @st.fragment(run_every=None if runs.finished() else 2)
    def bar() -> None:
        total, ready = len(runs.stages), runs.ready()
        failed = [s for s in runs.stages if s.done() and s.error() is not None]
        st.progress(ready / max(total, 1), text=f"Lesson runs prepared: {ready} of {total} stages"
                    + (f" ({len(failed)} failed: they run when opened)" if failed else "")
                    + ("" if runs.finished() else " — preparing on the model now"))
    bar()


def lesson_panel(open_poll: Callable[[str, str], None]) -> None:
    """The lesson's place, its moves, its notes and its runs' progress: drawn for the presenter of a room only (a
    learner, following or not, never sees the notes or the questions to come). `open_poll(kind, question)` opens a
    poll in the room for its request now (polls.open_room_poll)."""
    runs = lesson_runs()
    if runs is None:
        return
    if runs.lesson is None:
        st.error(f"The lesson this server was started with cannot be used: {markdown_text(runs.problem)}", icon="📚")
        return
    lesson, ss = runs.lesson, st.session_state
    n = min(max(int(ss.get("ls_stage", 0)), 0), len(lesson.stages) - 1)
    stage = lesson.stages[n]
    with st.container(border=True):
        c = st.columns([1, 6, 1])
        if c[0].button("◀ Lesson", key="ls_prev", disabled=n == 0, width="stretch"):
            go_to_stage(n - 1)
        c[1].markdown(f"📚 **{markdown_text(lesson.title)}** — stage {n + 1} of {len(lesson.stages)}: "
                      f"**{markdown_text(stage.title)}**" + (f" ({stage.minutes} min)" if stage.minutes else ""))
        if c[2].button("Lesson ▶", key="ls_next", disabled=n + 1 == len(lesson.stages), width="stretch"):
            go_to_stage(n + 1)
        if stage.say:
            st.caption(markdown_text(stage.say))
        if stage.poll:
            st.markdown(f"🗳️ Poll ({kind_name(stage.poll.kind)}): {markdown_text(stage.poll.question)}")
            st.button("Open this stage's poll", key="ls_poll", icon="🗳️", on_click=open_poll,
                      args=(stage.poll.kind, stage.poll.question))
        stage_link(page_at(stage.page).script, f"Open this stage's page: {page_at(stage.page).title}", "🔎",
                   query=stage.query())
        progress(runs)
