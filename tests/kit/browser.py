"""What the browser tests share: Debian's Chromium, an app server started like `./run.sh` does, and
waiting until a page has finished running."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.server.health import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "browser"
CHROMIUM = "/usr/bin/chromium"
# For a failed test's report (kit.browser_report): the pages `watch` follows and the app servers started, each
# {"name", "events" or "log", "ended": monotonic time or None}; kept while open and for the test that closed them.
_followed: list[dict] = []


def follow_server(name: str, log: Path) -> dict:
    """Report the server `name` (its log's tail) in a failed test's report; set the returned dict's "ended" to
    time.monotonic() when it stops."""
    followed = {"name": name, "log": log, "ended": None}
    _followed.append(followed)
    return followed


def forget_ended_before(moment: float) -> None:
    """Drop the pages and servers that ended before `moment` (a test's start): only the test that closed them
    reports them."""
    _followed[:] = [f for f in _followed if f["ended"] is None or f["ended"] >= moment]


# How often a wait for a condition in the page (wait_for_function) checks it: Playwright's default checks on every
# animation frame, which costs Chromium ~0.05-0.07 s of CPU for each second waited (bench/RESULTS.md); the waits
# here are for runs, text and charts that take a second or more, and every 100 ms finds them as well.
WAIT_POLL_MS = 100


def until(page, condition: str, arg=None, timeout_s: float = 30, every_ms: int = WAIT_POLL_MS):
    """Wait until the JavaScript function `condition` (called with `arg`) returns something true in `page`, checked
    every `every_ms` (WAIT_POLL_MS; longer where a check reads the whole page's text); Playwright's TimeoutError after
    `timeout_s`. The one way the tests wait for a condition inside a page."""
    return page.wait_for_function(condition, arg=arg, timeout=timeout_s * 1000, polling=every_ms)


# --process-per-site: the tabs of one context on one site (every port of localhost) share one renderer process, so a
# test's new tab in a warm context (warm_context) draws its page in a renderer that has drawn the app before
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic", "--process-per-site"]




@contextlib.contextmanager
def app_server(log_name: str, host: str = "localhost", cache_dir: Path | None = None, script: str = "app.py",
               args: tuple[str, ...] = (), env: dict[str, str] | None = None):
    """`streamlit run app.py` on a free port with the project's .streamlit/config.toml; yields its URL.
    cache_dir: the server's TPE_CACHE_DIR (conftest's `tiny_server_cache`: the tiny model), else the caller's.
    script: server.py for the pages and the API (as ./run.sh starts it); args: more `streamlit run` options
    (--server.address 0.0.0.0); env: more environment (TPE_API_KEY).

    The server warms up the default request only (TPE_WARM_UP=request, unless the caller's environment says
    otherwise): a page's prompt-caching scenario is played when that page first asks for it. With the
    server's default ("all") a real-model server played every scenario in the background after the first
    visit: 58-128 s of jobs in a whole-suite run, taking the cores from the other test process, and in the
    What if test a question waited 24 s behind one of them. The warm-up of every scenario is tested on its own
    (tests/pages/test_serving_pages.py); the room tests' replicas (tests/room/) set TPE_WARM_UP=request too."""
    port = free_port()
    (ROOT / "artifacts").mkdir(exist_ok=True)
    env = {**os.environ, "TPE_WARM_UP": os.environ.get("TPE_WARM_UP", "request"), "PYTHONUNBUFFERED": "1",
           **(env or {})}
    if cache_dir is not None:
        env["TPE_CACHE_DIR"] = str(cache_dir)
    with open(ROOT / "artifacts" / log_name, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", script, "--server.port", str(port), *args],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        url = f"http://{host}:{port}"
        followed = follow_server(f"server {url}", ROOT / "artifacts" / log_name)
        try:
            if not wait_healthy(url):
                pytest.fail("the Streamlit server did not start")
            yield url
        finally:
            followed["ended"] = time.monotonic()
            stop(proc, port)


def stop(proc: subprocess.Popen, port: int, timeout_s: float = 30) -> None:
    """Stop an app server as Ctrl+C does (Streamlit says "Stopping..." and closes its port), then, once its port is
    closed, end the process: Python's own shutdown after that took 2-8 s of wall time and ~1.6 s of CPU per server
    (its output is unbuffered, PYTHONUNBUFFERED: nothing it wrote is lost)."""
    import socket

    proc.terminate()
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("localhost", port), timeout=1).close()
        except OSError:  # refused: no longer serving
            break
        time.sleep(0.05)  # polling the port, bounded by the deadline
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=timeout_s)


def watch(page):
    """Record on the page what a failure message needs and the page does not keep: each websocket to the app opened
    or closed (seconds since the watch began) and the console's errors and warnings. Streamlit disables every
    widget while its socket is down, so a click then does nothing; `events(page)` says whether that happened."""
    start = time.monotonic()
    page.tpe_events = []

    def note(text: str) -> None:
        page.tpe_events.append(f"{time.monotonic() - start:.1f} s {text}")

    def socket(ws) -> None:
        note(f"socket opened {ws.url.split('/')[-1]}")
        ws.on("close", lambda _ws: note("socket closed"))
        ws.on("socketerror", lambda error: note(f"socket error {error}"))

    page.on("websocket", socket)
    page.on("console", lambda m: note(f"console {m.type}: {m.text[:160]}") if m.type in ("error", "warning") else None)
    followed = {"name": "page", "events": page.tpe_events, "ended": None}
    page.on("framenavigated", lambda frame: followed.update(name=f"page {frame.url}") if frame == page.main_frame
            else None)
    page.on("close", lambda _page: followed.update(ended=time.monotonic()))
    _followed.append(followed)
    return page


def events(page) -> list[str]:
    """What `watch` recorded on the page (empty for a page not watched)."""
    return list(getattr(page, "tpe_events", []))


def failure_context(log_lines: int = 30) -> str:
    """For a failed browser test's report (kit.browser_report): each watched page open now or closed during the
    test (its address and events) and the last lines of each app server's log, running or stopped during the test."""
    parts = []
    for f in list(_followed):
        state = "" if f["ended"] is None else " (closed)"
        if "events" in f:
            parts.append(f"{f['name']}{state}\n  " + ("\n  ".join(f["events"]) or "(no socket or console events)"))
            continue
        try:
            tail = f["log"].read_text(encoding="utf-8", errors="replace").splitlines()[-log_lines:]
        except OSError as e:
            tail = [f"(unreadable: {e})"]
        parts.append(f"{f['name']}{state}, the last {len(tail)} lines of {f['log'].name}:\n  " + "\n  ".join(tail))
    return "\n".join(parts)


def choose(page, box, option, shot: Path | None = None) -> None:
    """Pick `option` (an option's text or a pattern) in the selectbox `box` (a locator of its stSelectbox). Streamlit
    disables its widgets while the page's socket is down, and a click on a disabled picker opens nothing: wait until
    it takes input, open it, and if its list never shows, say what the page saw (watch) and save a screenshot."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    expect(box.locator("input").first).to_be_enabled(timeout=120_000)
    box.click()
    item = page.locator('[role="option"]', has_text=option).first
    try:
        item.wait_for(state="visible", timeout=30_000)
    except PlaywrightTimeout:
        if shot is not None:
            page.screenshot(path=str(shot))
        raise AssertionError(f"the picker's list did not open (or has no {option!r}); page events {events(page)}"
                             ) from None
    item.click()


def open_expander(page, label: str, timeout_s: float = 30) -> None:
    """Open the expander whose summary shows `label` (unless it is open) and wait until it has finished opening.
    Streamlit grows an opening expander's <details> over 500 ms with its content clipped: the content's boxes stand
    still, so Playwright finds a button "stable", yet the point under it is the expander's own block for most of the
    growth. A click then can press on the button and release on that block: no click, no run (seen in a room's poll
    test, its page's fragments rerunning meanwhile). The growth is an animation of the <details> itself; what runs
    inside it (a spinner, a stale element's fade) is not waited for."""
    summary = page.locator("summary", has_text=label).first
    if not summary.evaluate("s => s.closest('details').open"):
        summary.click()
    until(page, """label => [...document.querySelectorAll('details')].some(d => d.open
        && [...d.children].some(c => c.tagName === 'SUMMARY' && c.innerText.includes(label))
        && d.getAnimations().length === 0)""", arg=label, timeout_s=timeout_s)


def share_link(page, path: str) -> str:
    """The link to `path` in the sidebar's share box (its expander opened first)."""
    open_expander(page, "Share or export this view")
    return page.locator('[data-testid="stSidebar"] code').filter(has_text=f"/{path}").first.inner_text().strip()


SIDEBAR_LINK = '[data-testid="stSidebar"] a[data-testid="stPageLink-NavLink"]'


def open_page(page, title: str, timeout_s: float = 300, shot: Path | None = None) -> None:
    """Click the sidebar's link to page `title` until its h1 shows. A click made while the frontend is still
    reconnecting (its server was killed; the next one has not answered yet) is dropped by Streamlit, as a
    learner would see: nothing happens, and they click again. shot: a screenshot saved there on failure."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    deadline = time.monotonic() + timeout_s
    while True:
        page.locator(SIDEBAR_LINK, has_text=title).first.click()
        try:
            until(page, "t => document.querySelector('h1') && "
                  "document.querySelector('h1').innerText.includes(t)", arg=title, timeout_s=15)
            return
        except PlaywrightTimeout:  # not there yet
            if time.monotonic() > deadline:
                if shot is not None:
                    page.screenshot(path=str(shot))
                raise


# The app's end-of-run marks (views.chrome.frame.run_marker): "SESSION:COUNT" of the newest on the page, '' before any.
# A mark inside a stale element (Streamlit's data-stale="true": drawn by an earlier run, not yet redrawn by the run
# going on) is not the end of that run: a page that runs its script again at once (a link opened, a fragment) still
# shows the first run's mark while the second redraws the sidebar and the controls.
RUN_MARK = ("() => { let best = ''; let most = -1; for (const m of document.querySelectorAll('.tpe-run-done')) {"
            " if (m.closest('[data-stale=\"true\"]')) continue;"
            " const n = Number(m.dataset.run); if (n > most) { most = n; best = m.dataset.session + ':' + n; } }"
            " return best; }")
_seen: dict[int, tuple[object, str]] = {}  # id(page) -> (the page, the mark settle() last saw on it)


def run_mark(page) -> str:
    """The newest end-of-run mark on the page ('SESSION:COUNT'), '' before the first run has completed."""
    return page.evaluate(RUN_MARK)


def settle(page, timeout: float = 400) -> None:
    """Wait for the end of the run that the last action started, then for its charts' SVG.

    The end is the app's own signal: every completed run (a whole run, or a fragment's own rerun) draws, as its
    last element, a mark carrying the session's count of completed runs (views.chrome.frame.run_marker); a run that
    ends in st.rerun() draws none, so the run after it is the one waited for. Done: a mark newer than the one
    settle() last saw on this page (another session, after a reload or a page.goto, counts afresh). Call it only
    after an action that runs the script (a visit, a click, a widget change); an action that runs nothing (a key
    with no shortcut on the page) never brings a newer mark."""
    seen = _seen.get(id(page))
    before = seen[1] if seen and seen[0] is page else ""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        until(page, f"""before => {{ const now = ({RUN_MARK})(); if (!now) return false;
            if (!before) return true; const [s, n] = now.split(':'); const [bs, bn] = before.split(':');
            return s !== bs || Number(n) > Number(bn); }}""", arg=before, timeout_s=timeout)
    except PlaywrightTimeout:
        marks = page.evaluate("() => [...document.querySelectorAll('.tpe-run-done')].map(m => m.dataset.session "
                              "+ ':' + m.dataset.run)")
        # what tells "the action ran nothing" from "a run is still going" (Streamlit's running indicator, a
        # queue's place shown on the page) and which element held the keys
        running = page.locator('[data-testid="stStatusWidget"]').all_inner_texts()
        alerts = [a[:120] for a in page.locator('[data-testid="stAlert"]').all_inner_texts()]
        focus = page.evaluate("() => { const e = document.activeElement; return e ? e.tagName + "
                              "(e.getAttribute('aria-label') ? ' ' + e.getAttribute('aria-label') : '') : ''; }")
        raise AssertionError(f"no run completed in {timeout:.0f} s after the mark {before!r} ({page.url}); the page "
                             f"holds the marks {marks}; running indicator {running}; alerts {alerts}; "
                             f"focus on {focus!r}; page events {events(page)}") from None
    _seen[id(page)] = (page, run_mark(page))
    until(page, "() => [...document.querySelectorAll('.js-plotly-plot')]"
          ".every(p => p.querySelector('.main-svg'))", timeout_s=30)
    # and for every element's code: Streamlit loads a widget's or a chart's script when the page first draws one,
    # showing a grey skeleton (data-testid stSkeleton) meanwhile; on a busy machine the run's mark came while the
    # sidebar's boxes were still skeletons, and a test read no request box at all
    until(page, "() => !document.querySelector('[data-testid=\"stSkeleton\"]')", timeout_s=60)


def question_shown(page, timeout_s: float = 30) -> str:
    """What the sidebar's question box shows, once it shows anything: a box the browser has just drawn may
    be empty until its value arrives in the same frame's next step, so read it when it is not empty
    (a box left empty, the bug views.request.session.show_values_in_form fixes, returns '' after timeout_s)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = page.locator('[data-testid="stSidebar"] textarea').first
    try:
        until(page, "() => { const t = document.querySelector('[data-testid=\"stSidebar\"] textarea');"
              " return t && t.value !== ''; }", timeout_s=timeout_s)
    except PlaywrightTimeout:
        pass
    return box.input_value()


def tab(context):
    """A new watched tab of `context`, sized as warm_context was asked (else the context's own size)."""
    page = watch(context.new_page())
    size = getattr(context, "tpe_viewport", None)
    if size is not None:
        page.set_viewport_size(size)
    return page


def visit(context, url: str):
    """A watched tab of `context` at `url` (kit.browser.tab), settled (the page's run finished)."""
    page = tab(context)
    page.goto(url)
    settle(page)
    return page


def open_offline(chromium, path: Path, min_plots: int):
    """A saved HTML file (a report, a summary) opened in an offline context of `chromium`, once at least `min_plots`
    charts are drawn: (the page, the addresses it asked for other than file: and data:, which should be none)."""
    offline = chromium.new_context(offline=True)
    asked = []
    offline.on("request", lambda r: asked.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page = offline.new_page()
    page.goto(path.as_uri())
    until(page, "n => { const plots = [...document.querySelectorAll('.js-plotly-plot')];"
          " return plots.length >= n && plots.every(p => p.querySelector('.main-svg')); }", arg=min_plots,
          timeout_s=60)
    return page, asked


# A page drawn in a new context costs Chromium's renderer 4.5-5 s of CPU; a new tab of a context whose renderer has
# drawn the app before, ~2.5 s (bench/RESULTS.md). So a test process keeps one Chromium for all its browser files
# (chromium_process; each module connects to it: kit.browser_fixtures), its default context holds a tab on the site
# (localhost: every port) that keeps a renderer alive, and a test takes that context (warm_context) with the cookies
# and storage of the test before it cleared.
ANCHOR = "http://localhost:9/tpe-warm-renderer"  # answered by the kit itself (a route), never by a server
# The switches Playwright gives a Chromium it launches headless (playwright-core's chromiumSwitches and its headless
# additions, as the installed Playwright has them), for the Chromium chromium_process starts itself: a page behaves
# as under Playwright's own launch (no throttled background tab or timer, no back-forward cache, screenshots on a
# surface of their own, a mouse as the pointer)
_DISABLED = ["AvoidUnnecessaryBeforeUnloadCheckSync", "DestroyProfileOnBrowserClose", "HttpsUpgrades",
             "HttpsFirstBalancedModeAutoEnable", "LensOverlay", "MediaRouter", "PaintHolding",
             "ThirdPartyStoragePartitioning", "AvoidCorsURLLoaderRestartOnRedirect", "OptimizationHints",
             "NetworkTimeServiceQuerying", "AimEnabled", "PreconnectToSearch"]
PLAYWRIGHT_SWITCHES = [
    "--disable-field-trial-config", "--disable-background-networking", "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows", "--disable-back-forward-cache", "--disable-breakpad",
    "--disable-component-extensions-with-background-pages", "--disable-component-update",
    "--no-default-browser-check", "--disable-default-apps", "--disable-dev-shm-usage", "--disable-extensions",
    f"--disable-features={','.join(_DISABLED)}", "--enable-features=CDPScreenshotNewSurface,"
    "SkipListAccountsWithoutGaiaCookies", "--allow-pre-commit-input", "--disable-hang-monitor",
    "--disable-ipc-flooding-protection", "--disable-popup-blocking", "--disable-prompt-on-repost",
    "--disable-renderer-backgrounding", "--force-color-profile=srgb", "--metrics-recording-only", "--no-first-run",
    "--password-store=basic", "--use-mock-keychain", "--no-service-autorun", "--disable-search-engine-choice-screen",
    "--unsafely-disable-devtools-self-xss-warnings", "--enable-unsafe-swiftshader", "--disable-infobars",
    "--disable-sync", "--headless", "--hide-scrollbars", "--mute-audio",
    "--blink-settings=primaryHoverType=2,availableHoverTypes=2,primaryPointerType=4,availablePointerTypes=4"]
# What Playwright's list has that Debian's Chromium on Linux has no use for: Edge's, Windows' and macOS's own
# (tests/project/test_browser_switches.py compares both lists with the installed Playwright's)
NOT_FOR_CHROMIUM_ON_LINUX = {
    "--disable-edgeupdater": "Edge's updater on macOS", "--disable-updater-scheduler": "Edge's updater on macOS",
    "--edge-skip-compat-layer-relaunch": "Edge on Windows", "--do-not-de-elevate": "Windows' elevated processes",
    "--disable-stack-profiler": "Chrome for Testing's profiler, which crashes on Windows",
    "TcpPortRandomizationWin": "a feature of Windows", "msForceBrowserSignIn": "a feature of Edge",
    "msEdgeUpdateLaunchServicesPreferredVersion": "a feature of Edge on macOS"}


@contextlib.contextmanager
def chromium_process(profile: Path):
    """Debian's Chromium for a whole test process, outside Playwright (whose sync API holds the thread's event loop
    while it runs: a session-long Playwright would break every later test that runs asyncio), its DevTools on a port
    of 127.0.0.1, its messages in artifacts/chromium-PROCESS.log. Yields endpoint(): the address to connect_over_cdp
    to, Chromium started again first if it died."""
    state: dict = {"proc": None, "url": None}
    log = ROOT / "artifacts" / f"chromium-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.log"

    def endpoint() -> str:
        if state["proc"] is None or state["proc"].poll() is not None:
            port_file = profile / "DevToolsActivePort"  # Chromium writes its port and path there once it listens
            port_file.unlink(missing_ok=True)
            log.parent.mkdir(exist_ok=True)
            with open(log, "ab") as out:
                switches = dict.fromkeys([*PLAYWRIGHT_SWITCHES, *CHROMIUM_ARGS])  # ours beside Playwright's, once
                proc = subprocess.Popen([CHROMIUM, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                         "--remote-debugging-address=127.0.0.1", "--no-startup-window", *switches],
                                        stdout=out, stderr=out)
            deadline = time.monotonic() + 120  # as long as Playwright's own launch waits, at most
            while len(lines := (port_file.read_text().split() if port_file.exists() else [])) < 2:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise RuntimeError(f"Chromium opened no DevTools port (exit {proc.wait()}; {log})")
                time.sleep(0.05)  # polling the file Chromium writes, bounded by the deadline
            state.update(proc=proc, url=f"ws://127.0.0.1:{lines[0]}{lines[1]}")
        return state["url"]

    try:
        yield endpoint
    finally:
        if state["proc"] is not None:
            state["proc"].terminate()
            try:
                state["proc"].wait(timeout=30)
            except subprocess.TimeoutExpired:
                state["proc"].kill()


_given_back: dict[int, list] = {}  # id(browser) -> its contexts given back (dropped at disconnect)


def warm_context(chromium, width: int = 1400, height: int = 1200):
    """A context of `chromium` (kit.browser_fixtures' fixture) as a new browser is to the app: no cookie, local
    storage, permission or open tab of another test (each tab it opens is a session of its own). The process's
    default context when no test holds it, else one given back earlier in the module, else a new one. Its tabs are
    sized width x height (open them with kit.browser.tab or visit). Kept: the HTTP cache (the app's scripts load
    from it, as a returning visitor's do) and the renderer. Give it back (give_back) when the test is done."""
    idle = _given_back.setdefault(id(chromium), list(chromium.contexts[:1]))  # at first: the default context
    while idle:
        context = idle.pop()
        try:
            _clear(context)
            break
        except Exception:  # noqa: BLE001 - a context a test or a crash closed: take another
            continue
    else:
        context = chromium.new_context()
        _clear(context)
    context.tpe_viewport = {"width": width, "height": height}
    return context


def _anchor(context):
    """The context's tab that keeps its renderer alive: a page on the site (localhost), opened once."""
    for page in context.pages:
        if page.url == ANCHOR:
            return page
    page = context.new_page()
    context.route(ANCHOR, lambda route: route.fulfill(content_type="text/html", body="<title>warm</title>"))
    page.goto(ANCHOR)
    context.unroute(ANCHOR)
    return page


def _close_tabs(context) -> None:
    """Close every tab of the context but the anchor: their sessions end."""
    for page in context.pages:
        if page.url != ANCHOR:
            page.close()


def _clear(context) -> None:
    """What a test left in a context: its tabs (but the anchor), cookies, each origin's storage, permissions."""
    anchor = _anchor(context)
    _close_tabs(context)
    context.clear_cookies()
    context.clear_permissions()
    origins = [o["origin"] for o in context.storage_state()["origins"]]
    if origins:
        cdp = context.new_cdp_session(anchor)
        for origin in origins:
            cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "local_storage,indexeddb,"
                                                    "cache_storage,service_workers,file_systems"})
        cdp.detach()


def give_back(context) -> None:
    """A warm_context the test is done with: its tabs closed (their sessions end), kept for the module's next test."""
    _close_tabs(context)
    _given_back.setdefault(id(context.browser), []).append(context)


def disconnect(chromium) -> None:
    """The end of a module's connection to the process's Chromium: the tabs a test left open in the default context
    (one that failed holding it) closed, their sessions ended; the contexts the module made close with the
    connection."""
    for context in chromium.contexts[:1]:
        _close_tabs(context)
    _given_back.pop(id(chromium), None)
    chromium.close()


@contextlib.contextmanager
def fresh_page(chromium, width: int = 1400, height: int = 1200):
    """A watched tab of a warm_context of `chromium`: no cookie, storage or session of another test's page; the
    context given back after."""
    context = warm_context(chromium, width, height)
    try:
        yield tab(context)
    finally:
        give_back(context)


_tabs: dict = {}  # id(context) -> (context, its tab the module's tests take turns on)


@contextlib.contextmanager
def shared_tab(context, width: int = 1400, height: int = 1200):
    """The one watched tab of a context the module's tests share, sized for this test and left open for the next:
    each address a test opens in it starts a session of its own (a Streamlit session is its page's socket); the
    context's cookies and storage are shared, and so is the tab's history (a test goes back only as far as it went).
    Opening a page costs Chromium's renderer 4.0-4.4 s of CPU in a new context and 3.6-3.8 s in a new tab of a used
    one; a reload in a tab that already ran a page costs 1.6-2.2 s (bench/RESULTS.md). Use it where a test's meaning
    needs no fresh browser. Its recorded events start afresh for each test; a test that fails takes the tab with it
    (the next test gets a new one). Two tests never hold it at once: a module's tests run one after another."""
    kept = _tabs.get(id(context))
    if kept is None or kept[0] is not context or kept[1].is_closed():
        kept = _tabs[id(context)] = (context, watch(context.new_page()))
    page = kept[1]
    page.tpe_events.clear()  # in place: the failure report's copy (_followed) holds the same list
    page.set_viewport_size({"width": width, "height": height})
    try:
        yield page
    except BaseException:
        _tabs.pop(id(context), None)
        with contextlib.suppress(Exception):  # a crashed page may not close cleanly: the test's own error matters
            page.close()
        raise
