"""The speed verdicts a server has shown (pipeline.costs.verdicts), kept in one JSON file in the cache folder,
so a restart keeps them and every server sharing the folder (a room's replicas) shows the same ones.

Each addition reads the file, adds the measurement and writes it back whole (pipeline.core.files.write_atomic),
under a lock file beside it that every process sharing the folder takes, so two servers adding at once both
keep theirs. Bounded: MAX_QUESTIONS questions (the one added to least recently goes first) of MAX_PER_QUESTION
measurements each (the oldest go first). A file that cannot be read or makes no sense reads as no verdicts, with
a note in the log, and the next addition writes a good one; a folder that cannot be written keeps the
additions in this process's memory (logged), never an error on the page.

    store = VerdictFile(cache_root() / "verdicts.json")
    store.add(("compare_models", ...), comparison, at=time.time())   # -> the History of that question, dated
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Hashable

from pipeline.core.files import write_atomic
from pipeline.core.timing import Comparison
from pipeline.costs.verdicts import Dated, History, add

MAX_QUESTIONS = 256  # questions kept (about 1 kB each with their measurements)
MAX_PER_QUESTION = 32  # measurements kept per question
FORMAT = 1  # bump when the file's shape changes; a file of another format reads as empty
log = logging.getLogger("pipeline.server.store.verdict_file")


def question_id(key: Hashable) -> str:
    """A key (a tuple that may hold a whole prompt's ids) as a short name in the file."""
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _dated(d: dict) -> Dated:
    c = dict(d["comparison"])
    c["a_range"], c["b_range"] = tuple(c["a_range"]), tuple(c["b_range"])
    return Dated(float(d["at"]), Comparison(**c))


class VerdictFile:
    def __init__(self, path: Path, max_questions: int = MAX_QUESTIONS, max_per_question: int = MAX_PER_QUESTION):
        self.path = Path(path)
        self.max_questions, self.max_per_question = max_questions, max_per_question
        self._lock = threading.Lock()
        self._unsaved: dict[str, History] = {}  # additions the folder did not take (kept in this process)

    def history(self, key: Hashable) -> History:
        """Every kept measurement of `key`, oldest first."""
        qid = question_id(key)
        with self._lock:
            return self._merged(self._read().get(qid, ()), qid)

    def add(self, key: Hashable, comparison: Comparison, at: float) -> History:
        """The history of `key` with this measurement in it (added once, however often it is shown)."""
        qid = question_id(key)
        shown = () if self._unsaved else self.history(key)  # a page shows a measurement again on every rerun:
        if any(d.at == at for d in shown):  # then no file lock and no write (the file is replaced whole, atomically)
            return shown
        with self._lock, self._file_lock():
            kept = self._read()
            for unsaved in list(self._unsaved):  # what the folder did not take before goes in with this one
                kept[unsaved] = self._merged(kept.pop(unsaved, ()), unsaved)
            history = self._merged(kept.get(qid, ()), qid)
            if any(d.at == at for d in history):
                return history
            history = add(history, comparison, at)[-self.max_per_question:]
            kept.pop(qid, None)
            kept[qid] = history  # the question added to last goes last
            while len(kept) > self.max_questions:
                kept.pop(next(iter(kept)))
            try:
                write_atomic(self.path, lambda f: json.dump(self._as_data(kept), f), text=True)
                self._unsaved.clear()  # every unsaved one was merged in and written
            except (OSError, TypeError, ValueError) as e:  # a folder that takes no file; a value JSON cannot hold
                log.warning("the speed verdicts could not be written to %s (%s): kept in this server's memory",
                            self.path, getattr(e, "strerror", None) or e)
                self._unsaved[qid] = history
            return history

    def _merged(self, history: History, qid: str) -> History:
        for d in self._unsaved.get(qid, ()):
            history = add(history, d.comparison, d.at)
        return history[-self.max_per_question:]

    def _read(self) -> dict[str, History]:
        """The file's questions in the order they were last added to; {} (and a note in the log) when it is
        missing, unreadable or not a file of verdicts."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("the speed verdicts in %s cannot be read (%s): starting from none", self.path, e)
            return {}
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
            kept = {str(qid): tuple(_dated(d) for d in entries) for qid, entries in data["questions"].items()}
            # (a later version may hold more questions than this one keeps)
            return dict(list(kept.items())[-self.max_questions:])
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            log.warning("the speed verdicts in %s are not in the expected shape (%s): starting from none",
                        self.path, e)
            return {}

    @staticmethod
    def _as_data(kept: dict[str, History]) -> dict:
        return {"format": FORMAT, "questions": {qid: [{"at": d.at, "comparison": asdict(d.comparison)} for d in h]
                                                for qid, h in kept.items()}}

    def _file_lock(self):
        """Held while one process reads, adds and writes: the others sharing the folder wait (a folder where no
        lock file can be made: this process's lock only)."""
        return _FileLock(self.path.with_name(self.path.name + ".lock"))


class _FileLock:
    def __init__(self, path: Path):
        self.path, self.f = path, None

    def __enter__(self):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.f = open(self.path, "a")
            fcntl.flock(self.f, fcntl.LOCK_EX)
        except OSError:
            if self.f is not None:
                self.f.close()
            self.f = None
        return self

    def __exit__(self, *exc):
        if self.f is not None:
            fcntl.flock(self.f, fcntl.LOCK_UN)
            self.f.close()
