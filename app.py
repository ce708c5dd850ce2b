"""Token Pipeline Explorer: follow one chat request through a real small language model.

Start with `./run.sh` (server.py: these pages and the API on one port) or `streamlit run app.py` (the pages alone);
settings live in .streamlit/config.toml.
"""
import json
from pathlib import Path

from pipeline.server.process import give_freed_arrays_back, quiet_library_noise, wait_passively

wait_passively()  # before torch loads
quiet_library_noise()  # before torch and transformers log their import-time lines to the server's log
give_freed_arrays_back()  # before the model and a run's captures

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException

from pipeline.model.passes import PassCounter, counting_passes
from pipeline.stages.logit_bias import LOGIT_BIAS_CHARS
from pipeline.stages.request import option_ranges
from ui.chart_export import add_svg_buttons
from ui.connection_notice import explain_connection_errors
from ui.escape import markdown_text
from ui.history_entries import one_entry_per_page
from ui.report import trace_report
from ui.text_guard import guard_text_boxes
from views.chrome.frame import PageEnd, run_marker
from views.chrome.navigation import arrive
from views.chrome.my_session import notes_and_summary, record_visit
from views.chrome.page_list import PAGES, page_at
from views.links import url_state
from views.request.model_picker import model_picker, picked_model
from views.request.runs import stored_download, stored_sidebar_run
from views.request.session import (
    DEFAULTS,
    MODEL_FIELDS,
    TEXT_LIMIT,
    current_request,
    init_state,
    passes_caption,
    request_key,
    session_passes,
    show_values_in_form,
)
from views.server.state import get_model
from views.server.lesson_runs import lesson_runs
from views.server.warm_up import warm_up
from views.request.slider_args import slider_args

HERE = Path(__file__).parent
st.set_page_config(page_title="Token Pipeline Explorer", page_icon=str(HERE / "assets" / "favicon.png"),
                   layout="wide")

SESSION_DEFAULTS = {f"req_{k}": v for k, v in DEFAULTS.items()}


def sidebar(pages: list):
    """Our own page links (they carry the request in their query string, so it follows every move
    and survives a reconnect), then the request form. Returns a box filled after the page has run."""
    query = url_state.request_query(SESSION_DEFAULTS)
    with st.sidebar:
        for n, page in enumerate(pages):
            if n == 0 or PAGES[n].section != PAGES[n - 1].section:  # each section's name over its pages
                st.caption(PAGES[n].section)
            st.page_link(page, query_params=query)
        st.divider()
        model_picker()
        st.header("Your request")
        if st.button("Reset to the default request", width="stretch"):  # on the model picked
            st.session_state.update({k: v for k, v in SESSION_DEFAULTS.items() if k[4:] not in MODEL_FIELDS})
            st.rerun()
        show_values_in_form()
        with st.form("request_form"):
            st.text_area("Question (the new user message)", key="req_question", height=80, max_chars=TEXT_LIMIT)
            st.text_area("System prompt (empty: the template's own default, if it has one)", key="req_system",
                         height=68, max_chars=TEXT_LIMIT)
            st.text_area("Earlier turns, one per line (`user: ...` / `assistant: ...`)", key="req_history",
                         height=68, max_chars=TEXT_LIMIT * 4)
            st.markdown("**Generation options**")
            r = option_ranges(get_model().config_dims.V)  # top-k goes up to this model's vocabulary
            st.slider("max new tokens", **slider_args(r["max_new_tokens"]), key="req_max_new_tokens")
            st.slider("temperature (0 = greedy)", **slider_args(r["temperature"]), key="req_temperature")
            c1, c2 = st.columns(2)
            c1.number_input("top-k (0 = off)", **slider_args(r["top_k"]), key="req_top_k")
            c2.number_input("seed", **slider_args(r["seed"]), key="req_seed")
            c1.slider("top-p", **slider_args(r["top_p"]), key="req_top_p")
            c2.slider("min-p", **slider_args(r["min_p"]), key="req_min_p")
            st.text_input("stop strings (separate with |)", key="req_stop", max_chars=400)
            with st.expander("Penalties and bias (on the raw scores, before temperature)"):
                st.slider("repetition penalty (1 = off)", **slider_args(r["repetition_penalty"]),
                          key="req_repetition_penalty")
                c1, c2 = st.columns(2)
                c1.slider("presence penalty", **slider_args(r["presence_penalty"]), key="req_presence_penalty")
                c2.slider("frequency penalty", **slider_args(r["frequency_penalty"]), key="req_frequency_penalty")
                st.text_input("logit bias (token id:bias, e.g. 13:-100)", key="req_logit_bias",
                              max_chars=LOGIT_BIAS_CHARS)
            st.form_submit_button("Run the model", type="primary", width="stretch")
        with st.expander("Share or export this view", icon="🔗"):
            st.caption("This link opens the same request and controls in any browser (copy with the icon):")
            url_state.share_box(st.empty())  # filled after the page has run, and by fragments with controls
            exports = st.container()
        with st.expander("My notes and session", icon="📝"):
            mine = st.container()  # filled after the page has run (views/chrome/my_session.py)
        after = st.container()
        # Before the page runs: a server killed during a page's first (slow) run must find them already in the page
        explain_connection_errors()  # while the server is down: "restarting", not "are you connected?"
        guard_text_boxes()  # no lone surrogate is sent from a text box
        one_entry_per_page()  # Back and Forward move between pages, not between a page's addresses
        return exports, mine, after


def run_json(run) -> str:
    return json.dumps(run.to_json(), ensure_ascii=False, indent=1)


def download_buttons(key: tuple, trace) -> None:
    """The run's two files, the JSON and the report, made on one click and kept for this request (together a few MB;
    0.2-0.4 s), then ordinary downloads of those files. A download whose file is made when clicked (callable data)
    brought no file in two whole-suite runs (CI included) while passing alone and in the browser tier: that path is
    not trusted for the files a teacher hands out, and no button here uses it."""
    made = st.session_state.get("downloads_made")
    if made is None or made[0] != key:
        st.button("Make the downloads (the run as JSON; a report, one HTML file that opens offline)",
                  key="make_downloads", width="stretch",
                  on_click=lambda: st.session_state.update(downloads_made=(
                      key, stored_download(key, run_json), stored_download(key, trace_report))))
        return
    _, as_json, report = made
    st.download_button("Download the run as JSON", as_json, file_name=f"{trace.request.id}.json",
                       mime="application/json", key="dl_json", width="stretch", on_click="ignore")
    st.download_button("Download the report", report, file_name=f"{trace.request.id}.html", mime="text/html",
                       key="dl_html", width="stretch", on_click="ignore")


def share_and_export(boxes, passes: PassCounter) -> None:
    """After the page has run: the link to this view, the learner's notes and "My session", the trace download, the
    session's pass count."""
    lm = get_model()
    exports, mine, after = boxes
    url_state.sync()  # the address bar and the share box
    trace = stored_sidebar_run()
    with mine:  # this view in the learner's own list, their note on it, "My session"
        notes_and_summary(record_visit(page_path, page_at(page_path).title, trace, lm.tokenizer))
    with exports:
        if trace is not None:
            download_buttons(request_key(current_request()), trace)
        st.caption("Every chart saves itself from the icons at its top right: the camera as a PNG, 'SVG' as "
                   "an SVG, both drawn in your browser.")
    with after:
        where = f"on {lm.device_label}" if lm.is_loaded else lm.device_label  # not "on (loading ...)"
        st.caption(f"Model: {markdown_text(lm.name)} {where}. {passes_caption(passes)}")
    add_svg_buttons()


init_state()
notes = url_state.restore_model(SESSION_DEFAULTS)  # the link's model first: the page's ranges follow it
lm = picked_model(notes)  # name, dimensions, tokenizer: a stored run is drawn before the network has loaded
pages = [st.Page(str(HERE / p.script), title=p.title, icon=p.icon, url_path=p.url, default=(n == 0))
         for n, p in enumerate(PAGES)]
page = st.navigation(pages, position="hidden")
page_path = page.url_path or "start"  # the default page is served at /
arrive(page_path)  # the page before this one: the full map on Start and Journey lights it
notes = list(dict.fromkeys(notes + url_state.restore(page_path, SESSION_DEFAULTS)))  # the page's controls: as drawn
url_state.bind(page_path, SESSION_DEFAULTS)
after = sidebar(pages)
url_state.sync()  # the address holds the request before the page runs: a reload during a long run keeps the question
for note in notes:
    st.warning(note, icon="🔗")

completed = True  # a page that raised shows its error box: that run is complete too
st.session_state["_whole_run"] = True  # fragments drawn in it leave the run's end to run_marker() below
with counting_passes(session_passes()) as passes:
    try:
        page.run()
    except PageEnd:  # the page ended early on purpose (views.chrome.frame.end_page), its message drawn
        pass
    except RerunException:  # st.rerun(): the next run draws the page
        completed = False
        raise
    finally:  # also after an early end: the link follows every control, the count is this session's own
        st.session_state["_whole_run"] = False  # first: whatever below is interrupted, fragments mark their reruns
        share_and_export(after, passes)
        # Once per server, after the first page is drawn (so it does not wait for them): the network
        # loads, and the default request and the prompt-caching scenarios are prepared in the background.
        lm.start_loading()
        warm_up()
        lesson_runs()  # `--lesson FILE`: its stages' runs (server.py queued them at start; the pages alone: now)
        if completed:
            run_marker()
