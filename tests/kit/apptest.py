"""Streamlit's AppTest made lighter for a test run, one page in it, and what a chart drew."""
import os

from kit.paths import page_file


def lighter_apptest() -> None:
    """Three costs of Streamlit's AppTest that have nothing to do with the page under test, cut once
    streamlit.testing is imported (the behaviour of a run is the same):
      - every AppTest scans the metadata of every installed package for Streamlit components (~0.2-0.5 s each, ~280
        runs a fast-tier run): the installed packages do not change during a test run, so the scan runs once;
      - the test thread waits for the script thread in a 1 ms sleep loop (~80,000 wake-ups, each taking the GIL
        from the page's own work): it joins the script thread instead (the runner's SHUTDOWN event comes just
        before that thread ends), keeping AppTest's own timeout and its message;
      - every run of every AppTest starts a new script cache, so each page file was read, rewritten for
        Streamlit's "magic" and compiled again at every click (~6 % of the fast tier's CPU): the compiled code is
        kept for the run, per file and per version of it (path, modification time, size)."""
    from streamlit.components.v2 import manifest_scanner
    from streamlit.testing.v1 import app_test, local_script_runner

    if getattr(manifest_scanner.scan_component_manifests, "_once", False):
        return
    scan, scanned = manifest_scanner.scan_component_manifests, []

    def scan_once(*args, **kwargs):
        if not scanned:
            scanned.append(scan(*args, **kwargs))
        return list(scanned[0])

    scan_once._once = True
    manifest_scanner.scan_component_manifests = scan_once
    poll = local_script_runner.require_widgets_deltas

    def require_widgets_deltas(runner, timeout: float = 3) -> None:
        thread = runner._script_thread
        if thread is None:
            return poll(runner, timeout)
        thread.join(timeout)
        if not runner.script_stopped():  # what AppTest's own loop does on a timeout
            runner.request_stop()
            runner.join()
            raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")

    local_script_runner.require_widgets_deltas = require_widgets_deltas
    app_test.ScriptCache = local_script_runner.ScriptCache = script_cache_for_the_run()


def script_cache_for_the_run():
    """A ScriptCache class whose instances share the code they compiled, keyed by the file's version."""
    from streamlit import config
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache

    compiled: dict[tuple, object] = {}

    class RunScriptCache(ScriptCache):
        def get_bytecode(self, script_path: str):
            path = os.path.abspath(script_path)
            stat = os.stat(path)
            key = (path, stat.st_mtime_ns, stat.st_size, config.get_option("runner.magicEnabled"))
            if key not in compiled:
                compiled[key] = super().get_bytecode(path)
            return compiled[key]

    return RunScriptCache


def page_app(view: str, **session_state):
    """One page of views/ in Streamlit's AppTest (it runs the file alone, without app.py's sidebar), the
    sidebar's values preset: page_app("generation", req_max_new_tokens=8).run()."""
    from streamlit.testing.v1 import AppTest

    lighter_apptest()
    at = AppTest.from_file(page_file(view), default_timeout=600)
    for key, value in session_state.items():
        at.session_state[key] = value
    return at


def chart_data(chart) -> list[dict]:
    """A plotly chart of an AppTest as its traces' dicts, numeric arrays decoded (plotly packs numpy arrays as
    base64 'bdata'): chart_data(at.get("plotly_chart")[0])[0]["x"]."""
    import base64
    import json

    import numpy as np

    def decode(v):
        if isinstance(v, dict) and "bdata" in v:
            array = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
            shape = v.get("shape")
            if isinstance(shape, str):
                shape = [int(n) for n in shape.split(",")]
            return array.reshape(shape) if shape else array
        return v

    return [{k: decode(v) for k, v in trace.items()} for trace in json.loads(chart.proto.spec)["data"]]


def clear_streamlit_caches() -> None:
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()


def run_page(name: str, question: str | None = None, timeout: float = 300):
    """The page named `name` run once in AppTest (the sidebar's question preset if given), checked to raise nothing."""
    from streamlit.testing.v1 import AppTest

    lighter_apptest()
    at = AppTest.from_file(page_file(name), default_timeout=timeout)
    if question is not None:
        at.session_state["req_question"] = question
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def chart(at, key: str):
    """The plotly chart with this key (the attention page draws several: at_overview, at_heatmap, ...)."""
    charts = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(charts) == 1, [c.key for c in at.get("plotly_chart")]
    return charts[0]


def html_blocks(at) -> list[str]:
    """The Markdown blocks drawn with HTML allowed (chips, tables of tokens)."""
    return [m.value for m in at.markdown if m.proto.allow_html]


def json_bodies(at) -> list[str]:
    """The JSON code blocks (st.code(json_text(...), language="json")), each checked to parse as JSON."""
    import json

    bodies = [c.value for c in at.code if c.language == "json"]
    for body in bodies:
        json.loads(body)
    return bodies


def page_text(at) -> str:
    """The page's prose: its Markdown, captions and subheaders, one a line."""
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [s.value for s in at.subheader])


def plotly_count(at) -> int:
    return len(at.get("plotly_chart"))


def chart_arrays(at, index: int | str) -> dict:
    """{'<trace index>.<z|y|customdata>': values as float} for one plotly chart (by index or key), typed
    arrays decoded."""
    import base64
    import json

    import numpy as np

    out = {}
    c = chart(at, index) if isinstance(index, str) else at.get("plotly_chart")[index]
    for n, tr in enumerate(json.loads(c.proto.spec)["data"]):
        for field in ("z", "y", "customdata"):
            v = tr.get(field)
            if isinstance(v, dict) and "bdata" in v:  # plotly packs numpy arrays as base64
                out[f"{n}.{field}"] = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).astype(float)
            elif isinstance(v, list) and v and not isinstance(np.ravel(v)[0], str):
                out[f"{n}.{field}"] = np.asarray(v, dtype=float).ravel()
    return out


def named_by_a_path(labels: list[str]) -> bool:
    """TTFT named by the captured prefill, TPOT by the path the run's decode steps recorded (in the server's batch,
    or captured alone): pipeline.costs.named_time."""
    from pipeline.costs.named_time import PATH_NAMES, time_label

    return "TTFT (captured run)" in labels and len({time_label("TPOT", p) for p in PATH_NAMES} & set(labels)) == 1


def shown(elements) -> str:
    """What these elements say to the reader (their Markdown escapes resolved)."""
    from kit.markdown_links import shown as resolved

    return " ".join(resolved(e.value) for e in elements)


def presenter_at(stage: int, **state):
    """Presenter mode at `stage` on a short answer (4 tokens), run once without an exception; `state`: more
    session state (a follow link: `pr_follow=CODE`, a learner's page)."""
    at = page_app("presenter", pr_stage=stage, **{"req_max_new_tokens": 4, **state}).run()
    assert not at.exception, at.exception
    return at


def presenting_at(stage: int, **state):
    """A presenter who pressed Start presenting: the room exists from then on (a visit alone makes none)."""
    at = presenter_at(stage, **state)
    at.button(key="pr_start").click().run()
    assert not at.exception, at.exception
    assert at.session_state["pr_room"], [e.value for e in at.error]
    return at


def link_opened(page: str, query: dict[str, str]):
    """A link opened as a browser opens it: app.py with this query string (the request is read on the session's
    first page), then views/pages/`page` (its controls read on arrival); `page` "start.py" stays on app.py's first
    page. Run, not checked: the caller asserts what it means."""
    import os

    from streamlit.testing.v1 import AppTest

    from .paths import ROOT

    lighter_apptest()
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = dict(query)
    at.run()
    if page != "start.py":
        at.query_params = dict(query)
        at.switch_page(f"views/pages/{page}").run()
    return at


def lesson_presenter(tmp_path, monkeypatch, lesson_text: str):
    """The presenter's screen on a server started with this lesson (its file in tmp_path named by TPE_LESSON),
    through app.py, run once without an exception: (the AppTest, the lesson's file)."""
    from streamlit.testing.v1 import AppTest

    from kit.paths import ROOT

    path = tmp_path / "lesson.toml"
    path.write_text(lesson_text, encoding="utf-8")
    monkeypatch.setenv("TPE_LESSON", str(path))
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.run()
    at.switch_page("views/pages/presenter/page.py").run()
    assert not at.exception, at.exception
    return at, path
