"""The order in which `./run.sh test` hands test files to its two workers (a pytest plugin).

pytest-xdist's `--dist loadfile` gives each worker one file at a time, in the order collected (with
`--no-loadscope-reorder`; by default it sorts the files by their count of tests, which put the browser files, few
tests each but most of the time, at the end: both workers then drove Chromium at once while the cores idled, and
the last long file ran alone). Two kinds of file share two cores well: a browser file mostly waits (on its app
server, on Chromium, on a room's follow poll), a model or fast file computes. So the files are ordered as two lanes
merged, the browser files (the longest first) and the others (the longest first), the next file taken from the lane
that has handed out fewer seconds so far: while one worker waits in a browser file, the other computes.

A file's seconds are those of a whole-suite run on a 2-core machine (`file_seconds.json` beside this file; a file
not in it counts its tests at a rough cost per tier). Only the order depends on them, never a result. To measure
them again: `./run.sh test --junitxml=run.xml`, then `python tests/kit/file_order.py run.xml`."""
import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
SECONDS_PER_TEST = {"browser": 15.0, "model": 3.0, "app": 3.0, "fast": 0.1}  # a file not measured yet


def _tier(item) -> str:
    return next((tier for tier in ("browser", "model", "app") if item.get_closest_marker(tier)), "fast")


def interleaved_files(items, measured: dict[str, float]) -> list[str]:
    """The files of `items` in the order described above; `measured`: seconds per file path."""
    estimate: dict[str, float] = defaultdict(float)
    waits: dict[str, bool] = defaultdict(bool)
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        estimate[path] += SECONDS_PER_TEST[_tier(item)]
        waits[path] |= bool(item.get_closest_marker("browser"))
    seconds = {path: measured.get(path, guess) for path, guess in estimate.items()}
    lanes = [sorted((p for p in seconds if waits[p] is lane), key=lambda p: -seconds[p]) for lane in (True, False)]
    handed = [0.0, 0.0]
    order: list[str] = []
    while lanes[0] or lanes[1]:
        lane = 0 if lanes[0] and (not lanes[1] or handed[0] <= handed[1]) else 1
        path = lanes[lane].pop(0)
        handed[lane] += seconds[path]
        order.append(path)
    return order


@pytest.hookimpl(trylast=True)  # after kit.tiers has marked the tests that use the real model
def pytest_collection_modifyitems(config, items):
    """In the workers of a run with `--no-loadscope-reorder` (`./run.sh test`) only: other runs keep pytest's order.
    (A worker's `config.option.dist` reads "no": xdist sets it so before collection.)"""
    if not hasattr(config, "workerinput") or config.getoption("loadscopereorder", True):
        return
    measured = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.exists() else {}
    rank = {path: n for n, path in enumerate(interleaved_files(items, measured))}
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])  # stable: a file's tests keep their order


def seconds_from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file in a pytest JUnit XML report (each test's set-up, call and tear-down)."""
    import xml.etree.ElementTree as ET

    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        seconds[case.get("classname").replace(".", "/") + ".py"] += float(case.get("time") or 0)
    return {path: round(s, 1) for path, s in sorted(seconds.items())}


if __name__ == "__main__":
    FILE_SECONDS.write_text(json.dumps(seconds_from_junit(Path(sys.argv[1])), indent=0) + "\n")
