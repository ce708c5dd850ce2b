"""Speed verdicts are kept in the cache folder (pipeline/server/store/verdict_file.py, through
views/server/verdict_log.py): another process (a restarted server, a replica) finds them, a damaged file is survived,
and the file is bounded."""
import json
import os
import subprocess
import sys
import threading
import unittest
from pathlib import Path

from pipeline.core.timing import compare_runs

ROOT = Path(__file__).resolve().parents[3]
LOG = "pipeline.server.store.verdict_file"


def logged():
    """The store's log lines of warning and above, while the block runs (pytest's own capture is off here)."""
    return unittest.TestCase().assertLogs(LOG, "WARNING")
KEY = ("compare_models", ("smollm2", "gemma"), "question", "chat")
FIRST = compare_runs([0.010, 0.011, 0.012], [0.040, 0.044, 0.048])  # A 4.0x faster
LATER = compare_runs([0.020, 0.021, 0.022], [0.038, 0.040, 0.042])  # A 1.9x faster


def test_a_verdict_kept_by_one_server_process_is_found_by_another(tmp_path, monkeypatch):
    """The first measurement is made in another process (a server since restarted, or a replica) sharing the
    cache folder; this one adds its own and shows both."""
    script = ("from pipeline.core.timing import compare_runs\nfrom views.server.verdict_log import kept\n"
              f"kept({KEY!r}, compare_runs([0.010, 0.011, 0.012], [0.040, 0.044, 0.048]), 1000.0)\n")
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "TPE_CACHE_DIR": str(tmp_path)},
                   check=True, capture_output=True, timeout=120)
    monkeypatch.setenv("TPE_CACHE_DIR", str(tmp_path))
    from views.server.verdict_log import kept

    history = kept(KEY, LATER, 1600.0)
    assert [(d.at, d.comparison) for d in history] == [(1000.0, FIRST), (1600.0, LATER)]


def test_a_damaged_file_reads_as_no_verdicts_and_the_next_one_is_written_whole(tmp_path, monkeypatch):
    from views.server.verdict_log import kept

    monkeypatch.setenv("TPE_CACHE_DIR", str(tmp_path))
    for damaged in (b"\x00{not json", b'{"format": 1, "questions": {"q": [{"at": "noon"}]}}', b"[1, 2]"):
        (tmp_path / "verdicts.json").write_bytes(damaged)
        with logged() as seen:
            history = kept(KEY, FIRST, 1000.0)
        assert [d.comparison for d in history] == [FIRST]
        assert any("verdicts.json" in line and "starting from none" in line for line in seen.output)
        written = json.loads((tmp_path / "verdicts.json").read_text(encoding="utf-8"))
        assert [d["comparison"]["a_median"] for d in next(iter(written["questions"].values()))] == [FIRST.a_median]


def test_the_file_keeps_the_latest_questions_and_measurements_only(tmp_path):
    from pipeline.server.store.verdict_file import VerdictFile

    path = tmp_path / "verdicts.json"
    store = VerdictFile(path, max_questions=3, max_per_question=2)
    for q in range(5):
        store.add(("question", q), FIRST, at=float(q))
    for at in (10.0, 11.0, 12.0):
        store.add(("question", 2), LATER, at=at)  # question 2 is the one added to last
    again = VerdictFile(path, max_questions=3, max_per_question=2)  # a new server reading the same file
    assert [again.history(("question", q)) for q in (0, 1)] == [(), ()]
    assert [d.at for d in again.history(("question", 2))] == [11.0, 12.0]
    assert [len(again.history(("question", q))) for q in (3, 4)] == [1, 1]
    assert len(json.loads(path.read_text(encoding="utf-8"))["questions"]) == 3


def test_two_servers_adding_at_once_both_keep_theirs(tmp_path):
    from pipeline.server.store.verdict_file import VerdictFile

    path = tmp_path / "verdicts.json"
    servers = [VerdictFile(path, max_per_question=100), VerdictFile(path, max_per_question=100)]

    def measure(n):
        for i in range(20):
            servers[n].add(KEY, FIRST, at=n * 100.0 + i)

    threads = [threading.Thread(target=measure, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(VerdictFile(path, max_per_question=100).history(KEY)) == 40


def test_a_folder_that_takes_no_file_keeps_the_verdicts_in_memory(tmp_path):
    from pipeline.server.store.verdict_file import VerdictFile

    (tmp_path / "a file").write_text("")
    store = VerdictFile(tmp_path / "a file" / "verdicts.json")  # its folder is a file: nothing can be written
    with logged() as seen:
        store.add(KEY, FIRST, 1000.0)
        history = store.add(KEY, LATER, 1600.0)
    assert [d.comparison for d in history] == [FIRST, LATER] and store.history(KEY) == history
    assert any("kept in this server's memory" in line for line in seen.output)
