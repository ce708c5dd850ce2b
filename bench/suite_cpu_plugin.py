"""A pytest plugin for bench/suite_cpu.py: at each test file's start and end, the CPU seconds of this test process and
of every process it owns (its descendants, and the Chromium processes of its own profile, which Chromium's zygote
may leave to init), one JSON line each in $SUITE_CPU_DIR/files-PID.jsonl."""
from __future__ import annotations

import json
import os
import time

_out = None
_current: str | None = None
_config = None


def _owned() -> dict[int, float]:
    """{pid: CPU seconds} of the processes this test process owns (not itself)."""
    me, parents, procs, tick = os.getpid(), {}, {}, os.sysconf("SC_CLK_TCK")
    profile = f"{_config._tmp_path_factory.getbasetemp()}/chromium-profile"  # the kit's Chromium: one per process
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                chromium_of_mine = b"chromium" in (cmd := f.read(4096)) and profile.encode() in cmd
        except OSError:
            continue
        pid = int(name)
        parents[pid] = int(fields[1])
        procs[pid] = ((int(fields[11]) + int(fields[12])) / tick, chromium_of_mine)
    owned = {}
    for pid, (cpu, chromium_of_mine) in procs.items():
        up, seen = pid, 0
        while up > 1 and up != me and seen < 64:
            up, seen = parents.get(up, 0), seen + 1
        if pid != me and (up == me or chromium_of_mine):
            owned[pid] = cpu
    return owned


def _mark(kind: str, file: str) -> None:
    global _out
    if _out is None:
        _out = open(os.path.join(os.environ["SUITE_CPU_DIR"], f"files-{os.getpid()}.jsonl"), "a")
    _out.write(json.dumps({"k": kind, "file": file, "t": time.time(), "own": time.process_time(),
                           "owned": _owned()}) + "\n")
    _out.flush()


def pytest_configure(config):
    global _config
    _config = config


def pytest_runtest_logstart(nodeid, location):
    global _current
    if getattr(_config.option, "numprocesses", None) and not hasattr(_config, "workerinput"):
        return  # under xdist the controller reports every worker's tests: only the workers measure
    file = nodeid.split("::")[0]
    if file != _current:
        if _current is not None:
            _mark("end", _current)
        _current = file
        _mark("start", file)


def pytest_sessionfinish(session):
    if _current is not None:
        _mark("end", _current)
