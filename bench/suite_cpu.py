"""Where a test run's CPU goes: every process it started, by kind, and each test file's share.

    .venv/bin/python bench/suite_cpu.py                       # the main run of ./run.sh test (two workers)
    .venv/bin/python bench/suite_cpu.py -- tests/browser -n 2 --dist loadfile   # any pytest arguments after --

Linux's process accounting (acct(2): root, or CAP_SYS_PACCT) writes a record for every process that ends, the
short-lived ones too, with its CPU seconds; a sampler of /proc names them by their command lines; the plugin
bench/suite_cpu_plugin.py measures each test file in the test process that runs it (its own CPU, and that of the
processes it owns: app servers, Chromium, command lines). Prints the machine's busy core-seconds over the run
(/proc/stat), the CPU seconds by kind of process, then the test files that cost most."""
from __future__ import annotations

import argparse
import collections
import ctypes
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_RUN = ["-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]  # ./run.sh test's, on two cores
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")  # linux/acct.h struct acct_v3: 64 bytes
AHZ = 100  # acct's clock ticks a second


def comp_t(value: int) -> int:
    """acct's 16-bit number: a 13-bit mantissa, a base-8 exponent in the top 3 bits."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def read_acct(path: Path) -> list[dict]:
    """Each ended process: pid, ppid, comm, its CPU seconds (user + system), when it started (epoch seconds, to the
    second) and when it ended."""
    data, out = path.read_bytes(), []
    for at in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        (_flag, version, _tty, _exit, _uid, _gid, pid, ppid, btime, etime, utime, stime,
         *_rest, comm) = ACCT_V3.unpack_from(data, at)
        if version & 0x7F != 3:
            continue
        out.append({"pid": pid, "ppid": ppid, "comm": comm.split(b"\0")[0].decode(errors="replace"),
                    "cpu": (comp_t(utime) + comp_t(stime)) / AHZ, "started": btime, "ended": btime + etime / AHZ})
    return out


class CommandLines(threading.Thread):
    """Every process's command line, read from /proc every 0.2 s (read again for a second after a process is first
    seen: a fork takes its parent's command line until it execs)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.lines: dict[int, str] = {}
        self.first_seen: dict[int, float] = {}  # monotonic
        self.born: dict[int, float] = {}  # epoch seconds: when first seen
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            now = time.monotonic()
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) not in self.first_seen:
                    self.born[int(name)] = time.time()
                if name.isdigit() and now - self.first_seen.setdefault(int(name), now) < 1.0:
                    try:
                        with open(f"/proc/{name}/cmdline", "rb") as f:
                            line = f.read(2000).replace(b"\0", b" ").decode(errors="replace").strip()
                    except OSError:
                        continue
                    self.lines[int(name)] = line or self.lines.get(int(name), "")


def kind(record: dict, line: str) -> str:
    """What a process was, from its command line (else its last thread's name)."""
    if "chromium" in line or record["comm"].startswith("chrom"):
        for flag, name in (("--type=renderer", "Chromium renderers"), ("--type=gpu-process", "Chromium GPU process"),
                           ("--type=", "Chromium utilities and zygotes")):
            if flag in line:
                return name
        return "Chromium browser process"
    for text, name in (("exec(eval(sys.stdin", "test processes (pytest-xdist workers)"), ("pytest", "pytest"),
                       ("streamlit run", "app servers (streamlit run)"), ("playwright/driver", "Playwright's driver"),
                       ("-m pipeline", "command lines (python -m pipeline)"), ("redis-server", "Redis"),
                       ("haproxy", "HAProxy")):
        if text in line:
            return name
    return "python, other" if "python" in line else f"other ({record['comm'] or '?'})"


def busy_core_seconds() -> tuple[float, float]:
    """(busy, all) core-seconds since boot, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / tick, sum(ticks) / tick


def file_costs(folder: Path, ended: list[dict], born: dict[int, float]) -> list[tuple[float, float, float, float, str]]:
    """Each test file: (CPU, its test process's own, the processes it owned, wall seconds, file), most first. A process
    seen at a file's marks counts there for what it used between them, and where it ended for what it used after the
    last mark that saw it; one never seen (started and ended between two marks) counts where it started (`born`:
    when the sampler first saw it, else acct's start, to the second)."""
    costs = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for path in glob.glob(str(folder / "files-*.jsonl")):
        worker = int(Path(path).stem.split("-")[1])
        marks = [json.loads(line) for line in open(path)]
        windows = list(zip(marks[::2], marks[1::2]))
        last_seen: dict[int, float] = {}  # pid -> its CPU at the last mark that saw it
        for start, end in windows:
            cost = costs[end["file"]]
            cost[0] += end["own"] - start["own"]
            cost[2] += end["t"] - start["t"]
            cost[1] += sum(cpu - start["owned"].get(pid, 0.0) for pid, cpu in end["owned"].items())
            last_seen.update({int(pid): cpu for mark in (start, end) for pid, cpu in mark["owned"].items()})

        def window_at(moment: float) -> str | None:
            return next((end["file"] for start, end in windows if start["t"] <= moment < end["t"]), None)

        for record in ended:
            pid = record["pid"]
            if pid in last_seen:  # what it used after the last mark that saw it
                file, seconds = window_at(record["ended"]), record["cpu"] - last_seen[pid]
            elif record["ppid"] in last_seen or record["ppid"] == worker:
                file, seconds = window_at(born.get(pid, record["started"] + 0.5)), record["cpu"]
            else:
                continue
            if file is not None:
                costs[file][1] += max(0.0, seconds)
    return sorted(((own + owned, own, owned, wall, file) for file, (own, owned, wall) in costs.items()), reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=30, help="test files to list (default 30)")
    parser.add_argument("pytest_args", nargs="*",
                        help="after --: pytest's arguments (default: ./run.sh test's main run)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="suite-cpu-"))
    acct_file = folder / "acct"
    acct_file.touch()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(str(acct_file).encode()) != 0:
        print(f"process accounting refused ({os.strerror(ctypes.get_errno())}): it needs root or CAP_SYS_PACCT",
              file=sys.stderr)
        return 2
    names = CommandLines()
    names.start()
    busy0, all0 = busy_core_seconds()
    t0 = time.time()
    env = {**os.environ, "SUITE_CPU_DIR": str(folder),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "bench"), os.environ.get("PYTHONPATH")]))}
    try:
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "suite_cpu_plugin",
                                *(args.pytest_args or MAIN_RUN)], cwd=ROOT, env=env)
    finally:
        wall = time.time() - t0
        busy1, all1 = busy_core_seconds()
        libc.acct(None)
        names.done.set()
    ended = read_acct(acct_file)
    by_kind, count = collections.Counter(), collections.Counter()
    for record in ended:
        name = kind(record, names.lines.get(record["pid"], ""))
        by_kind[name] += record["cpu"]
        count[name] += 1
    print(f"\npytest exited {code} after {wall:.0f} s; the machine's cores were busy {busy1 - busy0:.0f} of "
          f"{all1 - all0:.0f} core-seconds ({(busy1 - busy0) / (all1 - all0):.0%})")
    print(f"CPU seconds of the {len(ended)} processes that ran and ended ({sum(by_kind.values()):.0f} s), by kind:")
    small = [name for name, seconds in by_kind.items() if seconds < 0.5]
    for name, seconds in by_kind.most_common():
        if name not in small:
            print(f"  {seconds:8.1f}  {count[name]:5d}  {name}")
    print(f"  {sum(by_kind[n] for n in small):8.1f}  {sum(count[n] for n in small):5d}  the rest ({len(small)} kinds,"
          " each under 0.5 s)")
    costs = file_costs(folder, ended, names.born)
    print(f"\nTest files by CPU seconds, {min(args.top, len(costs))} of {len(costs)}: the test process's own and that "
          "of the processes it owned (app servers, Chromium, command lines)")
    print(f"  {'CPU':>7}  {'own':>7}  {'owned':>7}  {'wall':>7}  file")
    for cpu, own, owned, wall_s, file in costs[:args.top]:
        print(f"  {cpu:7.1f}  {own:7.1f}  {owned:7.1f}  {wall_s:7.1f}  {file}")
    shutil.rmtree(folder, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
