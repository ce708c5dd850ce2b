"""The switches kit.browser's own Chromium starts with (PLAYWRIGHT_SWITCHES) are the ones the installed Playwright gives
a Chromium it launches headless, read from Playwright's own code: a Playwright upgrade that changes them fails here
instead of letting the browser tests' Chromium drift from what Playwright expects (a background tab's screenshot hung
without CDPScreenshotNewSurface)."""
import re
from pathlib import Path

import playwright
import pytest
from kit.browser import NOT_FOR_CHROMIUM_ON_LINUX, PLAYWRIGHT_SWITCHES

BUNDLE = Path(playwright.__file__).parent / "driver" / "package" / "lib" / "coreBundle.js"


def js_array(source: str, start: str, end: str = "]") -> list[str]:
    """The string literals of the JavaScript list that begins at `start` (up to `end`), comments dropped; a
    conditional's empty string ("" : "--x") dropped too; a join's separator (",") is one of them."""
    at = source.find(start)
    if at < 0:
        pytest.fail(f"{start!r} is no longer in {BUNDLE}: read how this Playwright launches Chromium and mend the test")
    code = "\n".join(line.split("//", 1)[0] for line in source[at + len(start):].splitlines())
    return [s for s in re.findall(r'"([^"]*)"', code[:code.index(end)]) if s]


def playwrights_switches() -> tuple[list[str], list[str], list[str]]:
    """(switches, disabled features, enabled features) of a headless launch, as the installed Playwright builds them:
    chromiumSwitches(), then what _innerDefaultArgs adds for headless."""
    source = BUNDLE.read_text(encoding="utf-8")
    switches = js_array(source, "chromiumSwitches = (options) => [")
    headless = js_array(source, 'chromeArguments.push("--headless");', ")")  # the next push(...) adds the rest
    return ([s for s in switches if s.startswith("--") and not s.endswith("-features=")] + ["--headless", *headless],
            js_array(source, "disabledFeatures = ["), js_array(source, "enabledFeatures = () => ["))


def features(switches: list[str], name: str) -> list[str]:
    return next(s.split("=", 1)[1].split(",") for s in switches if s.startswith(f"--{name}-features="))


def test_the_kits_chromium_starts_with_playwrights_own_switches():
    theirs, disabled, enabled = playwrights_switches()
    assert "--disable-back-forward-cache" in theirs and "CDPScreenshotNewSurface" in enabled  # the parse read them
    ours = [s for s in PLAYWRIGHT_SWITCHES if "-features=" not in s]
    assert sorted(ours) == sorted(s for s in theirs if s not in NOT_FOR_CHROMIUM_ON_LINUX)
    assert sorted(features(PLAYWRIGHT_SWITCHES, "disable")) == sorted(
        f for f in disabled if f not in NOT_FOR_CHROMIUM_ON_LINUX)
    assert sorted(features(PLAYWRIGHT_SWITCHES, "enable")) == sorted(enabled)
    assert set(NOT_FOR_CHROMIUM_ON_LINUX) <= {*theirs, *disabled}  # each one left out is still Playwright's
