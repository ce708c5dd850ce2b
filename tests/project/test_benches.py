"""The benchmarks still run against the code they measure (bench/ is not imported by the app, so a move in
pipeline/ can break a script silently: bench/room_cpu.py timed `generation.BatchDecoder` long after it moved), and
the GPU session's script is well formed. Each runs in its own process: the scripts patch classes to time them."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kit.paths import ROOT

BENCH = Path(ROOT) / "bench"


def bench_module(name: str):
    """A bench script loaded as a module (bench/ is no package), for its constants."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCH)])}
    return subprocess.run(args, cwd=BENCH, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_room_bench_finds_every_part_it_times():
    """bench/room_cpu.py wraps the queue's, the decoders' and the trace's functions by name: every one exists."""
    out = run([sys.executable, "-c", "import room_cpu; p = room_cpu.Parts(); room_cpu.instrument(p); print('ok')"])
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_gpu_session_script_parses_and_names_its_verbs():
    assert subprocess.run(["bash", "-n", str(BENCH / "gpu_session.sh")]).returncode == 0
    usage = subprocess.run(["bash", str(BENCH / "gpu_session.sh")], capture_output=True, text=True)
    assert usage.returncode == 2 and all(verb in usage.stdout for verb in ("prepare", "keep", "run measure",
                                                                           "run tests"))
    refused = subprocess.run(["bash", str(BENCH / "gpu_session.sh"), "run", "measure"], capture_output=True,
                             text=True, env={k: v for k, v in os.environ.items() if k != "OUT"})
    assert refused.returncode != 0 and "OUT must name" in refused.stderr


@pytest.mark.model
def test_the_gpu_decode_bench_runs_its_quick_sizes_on_a_cpu():
    """The GPU decode table at its CPU sizes (a tiny random-weight model): every row printed, the greedy ids of the
    plain, graphed and HF paths equal (the script exits non-zero otherwise)."""
    out = run([sys.executable, "gpu_decode.py", "--quick", "--device", "cpu", "--tokens", "3", "--repeats", "1"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    for row in ("greedy ids: plain, graphed and HF eager the same", "plain decode, bf16", "graphed decode, fp32",
                "room steps: greedy ids of every row, eager and static, the same", "prefill T=256", "the floor, bf16"):
        assert row in out.stdout, (row, out.stdout[-3000:])
    counts = {}  # the operations a plain step dispatches: bf16's norms add their casts (test_launches.py)
    for precision in ("fp32", "bf16"):
        line = next(x for x in out.stdout.splitlines() if f"operations a decode step dispatches, {precision}:" in x)
        counts[precision] = int(line.split("plain ")[1].split(" ")[0].replace(",", ""))
        assert "plain" in line and "(0 host reads)" in line.split(";")[0]  # a plain step never waits on the host
    layers = bench_module("gpu_decode").QUICK_LAYOUT["num_hidden_layers"]
    assert counts["bf16"] - counts["fp32"] >= 2 * (2 * layers + 1)  # every norm: 2 casts


def test_run_sh_agent_runs_the_agent_bench_and_the_api_bench_parses_its_arguments():
    """`./run.sh agent` is bench/agent_traffic.py (its own --help); bench/api_beside_learners.py imports the room
    bench's learner and the agent bench's server it reuses."""
    agent = subprocess.run(["./run.sh", "agent", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert agent.returncode == 0 and "--turns" in agent.stdout and "--base-url" in agent.stdout, agent.stderr[-2000:]
    beside = run([sys.executable, "api_beside_learners.py", "--help"])
    assert beside.returncode == 0 and "--learners" in beside.stdout and "--clients" in beside.stdout, beside.stderr


def test_the_poll_bench_on_a_server_finds_the_learner_and_server_it_reuses():
    """bench/room_poll_bench.py --server imports the room bench's learner, the started server and its own store of
    runs from the other benches: every one exists, and its arguments parse."""
    out = run([sys.executable, "-c", "import room_poll_server as s; print(s.run_on_server.__name__)"])
    assert out.returncode == 0 and out.stdout.strip() == "run_on_server", out.stderr[-2000:]
    usage = run([sys.executable, "room_poll_bench.py", "--help"])
    assert usage.returncode == 0 and "--server" in usage.stdout and "--rounds" in usage.stdout, usage.stderr


def test_the_poll_bench_counts_a_room_of_answers_through_the_store():
    """The store-only room: 6 learners answering twice through two replicas' stores, each counted once."""
    out = run([sys.executable, "room_poll_bench.py", "--learners", "6"], timeout=120)
    assert out.returncode == 0 and "counted 6 (expected 6)" in out.stdout and "PASS" in out.stdout, \
        out.stdout[-2000:] + out.stderr[-2000:]


def test_the_suite_cpu_bench_counts_the_cpu_of_a_test_files_child(tmp_path):
    """bench/suite_cpu.py on a one-test file whose test starts a child that burns a second of CPU: the child's CPU is
    in the file's row (the processes it owned) and in the table by kind. Its 16-bit acct numbers decoded by hand."""
    suite_cpu = bench_module("suite_cpu")
    assert [suite_cpu.comp_t(v) for v in (100, (1 << 13) | 1, (2 << 13) | 5)] == [100, 8, 320]  # m << 3e
    if "SUITE_CPU_DIR" in os.environ:
        pytest.skip("run by bench/suite_cpu.py itself: a second accounting file would end the first")
    test = tmp_path / "test_burn.py"
    test.write_text("import subprocess, sys\n\n\ndef test_burn():\n"
                    "    subprocess.run([sys.executable, '-c', 'import time\\nwhile time.process_time() < 1.0: pass'],"
                    " check=True)\n")
    out = run([sys.executable, "suite_cpu.py", "--", str(test), "-p", "no:cacheprovider"])
    if out.returncode == 2 and "process accounting refused" in out.stderr:
        pytest.skip(out.stderr.strip())  # not root: the bench says so
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    row = next(line for line in out.stdout.splitlines() if line.endswith("test_burn.py")).split()
    cpu, own, owned = map(float, row[:3])
    assert owned >= 0.9 and cpu == pytest.approx(own + owned, abs=0.15), row  # the child's second
    assert owned < 1.6, row  # counted once (its Python's start adds a little), not again where it ended
    kinds = out.stdout.split("by kind:")[1].split("Test files")[0]
    assert "python, other" in kinds, kinds
