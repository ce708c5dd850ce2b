"""A room's polls, kept beside the room's own file (pipeline/server/room_files.py: the room's folder, or the room's
Redis), so every replica sharing the room sees them and a restarted server still has them.

The policy, in a few lines:
- Only the holder of the room's presenter key (`RoomStore.may_drive`) opens, reveals or closes a poll; opening one
  closes the room's poll before it. A room keeps at most MAX_POLLS polls.
- Layout under the room folder: `polls-CODE/current.json` names the room's poll; `polls-CODE/poll-ID.json` is its
  record (`record.Poll`); `polls-CODE/answers-ID/DIGEST.json` is one learner session's answer, DIGEST the SHA-256 of
  the session's id (no id, no name in any file). Every file is written whole (write_atomic): two replicas never
  write the same file for two different learners, so no answer is lost to another's write.
- One answer per session per poll: a second answer replaces the first (the same file). A poll takes at most
  MAX_ANSWERS sessions; an answer is cleaned and bounded first (`record.clean_answer`). Answers are taken while the
  poll is open; Reveal freezes them in the poll's record (the class view and the summary read that copy).
- Reveal and an answer on another replica, at the same moment: Reveal first marks the poll revealed (no answer is
  taken from then on), waits REVEAL_SETTLE_S for the answers already under way to finish (each writes its file,
  then reads the poll again and takes its file back if the poll is no longer open), and only then lists the answers
  it freezes. So an answer told "kept" is among the frozen ones and an answer told "closed" is not, unless one
  answer's two steps straddle more than REVEAL_SETTLE_S (a stalled shared disk).
- A learner who followed the room and asks a question of their own is counted (`note_question`: one empty file per
  session and question, named by a digest; no text is kept), for the room summary.
- The room's files go with the room: when the room index removes a room it removes `polls-CODE/` too (in Redis they
  expire with it: each time the room is seen, both are kept a week longer), so a room's polls are bounded by
  MAX_POLLS x MAX_ANSWERS short files (about 5 MB at most) and never outlive it.

Example: open (key) -> answer(s1, "Paris"), answer(s2, "Rome"), answer(s1, "Lyon") -> count 2 -> reveal (key) ->
revealed_answers ["Lyon", "Rome"] (s1's second answer replaced its first).
"""
from __future__ import annotations

import hashlib
import time

from pipeline.server.polls.record import POLL_ID, Poll, clean_answer, new_poll
from pipeline.server.room import CODE, RoomStore
from pipeline.server.room_files import StoreUnavailable

MAX_POLLS = 50  # a whole day's workshop asks a few dozen questions
MAX_ANSWERS = 300  # learner sessions per poll: a lecture hall, with room for reloads (each a new session)
MAX_QUESTIONS = 5000  # learners' own questions counted per room
REVEAL_SETTLE_S = 0.5  # Reveal's wait for answers under way (an answer's write and second look take milliseconds)


class PollClosed(Exception):
    """The poll takes no answer now (revealed, closed, or gone): the message says which, for the learner."""


class PollFull(Exception):
    """A bound is reached (answers to this poll, or polls of this room): the message says which."""


def session_digest(session: str) -> str:
    return hashlib.sha256(f"poll-session:{session}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


class PollStore:
    """The polls of the rooms `rooms` keeps (its files: the folder or the room's Redis; its keys)."""

    def __init__(self, rooms: RoomStore, max_polls: int = MAX_POLLS, max_answers: int = MAX_ANSWERS):
        self.rooms, self.max_polls, self.max_answers = rooms, max_polls, max_answers
        self.files = rooms.files

    # -- where --------------------------------------------------------------------------------------------
    def _folder(self, code: str) -> str:
        if not CODE.fullmatch(code or ""):
            raise ValueError("room code")
        return f"polls-{code}"

    def _answers(self, code: str, poll_id: str) -> str:
        if not POLL_ID.fullmatch(poll_id or ""):
            raise ValueError("poll id")
        return f"{self._folder(code)}/answers-{poll_id}"

    def _read(self, name: str) -> dict | None:
        """A file's data; None when it is missing, or while the room's store does not answer (a poll is then not
        shown for a moment, and an answer's write fails with the reason)."""
        try:
            return self.files.read(name)
        except StoreUnavailable:
            return None

    def _write(self, name: str, data: dict) -> None:
        if not self.files.write(name, data):
            raise OSError(f"the room's store ({self.files.where}) did not keep {name}")

    def _check_key(self, code: str, key: str) -> None:
        if not self.rooms.may_drive(code, key):
            raise PermissionError(f"this key does not drive room {code}")

    # -- the presenter's moves (the key) --------------------------------------------------------------------
    def open_poll(self, code: str, key: str, kind: str, question: str, query: dict[str, str], stage: int = 0,
                  real: dict | None = None, choices: list[str] = ()) -> Poll:
        """Open a poll of `kind` asking `question` about the request `query`; the room's open poll, if any, is
        closed. `real`: the model's figure (`real.real_figure`), kept until Reveal. PermissionError without the
        room's key; PollFull past MAX_POLLS."""
        self._check_key(code, key)
        if len(self.polls(code)) >= self.max_polls:
            raise PollFull(f"This room has asked {self.max_polls} questions, its most.")
        now = self.current(code)
        if now is not None:
            self._save(code, _with(now, closed_at=time.time()))
        poll = new_poll(kind, question, query, stage, real, choices)
        self._save(code, poll)
        self._write(f"{self._folder(code)}/current.json", {"poll": poll.id})
        return poll

    def reveal(self, code: str, key: str, poll_id: str) -> Poll:
        """Show the class's answers (frozen now) and the real figure kept since the poll opened. PermissionError
        without the key."""
        self._check_key(code, key)
        poll = self._poll_or_raise(code, poll_id)
        if poll.status == "open":
            poll = _with(poll, revealed_at=time.time())
            self._save(code, poll)  # from now on answer() refuses, and takes back a write it made just before
        elif poll.status != "revealing":  # revealed or closed already
            return poll
        time.sleep(max(0.0, poll.revealed_at + REVEAL_SETTLE_S - time.time()))  # also a Reveal cut short: finished
        poll = self._poll_or_raise(code, poll_id)  # as it is now: closed meanwhile (another tab's Close, a new poll)
        if poll.status != "revealing":  # or revealed by another replica: left as it is
            return poll
        poll = _with(poll, revealed_answers=self.answers(code, poll_id))
        self._save(code, poll)
        return poll

    def close(self, code: str, key: str, poll_id: str) -> Poll:
        """End the poll: learners' screens drop it. PermissionError without the key."""
        self._check_key(code, key)
        poll = self._poll_or_raise(code, poll_id)
        if poll.status != "closed":
            poll = _with(poll, closed_at=time.time())
            self._save(code, poll)
        return poll

    # -- learners -----------------------------------------------------------------------------------------
    def answer(self, code: str, poll_id: str, session: str, text: str) -> str:
        """Keep `session`'s answer to the poll (a second replaces the first); returns it as stored.
        ValueError: an answer the poll cannot take (the message says why); PollClosed: not open any more;
        PollFull: MAX_ANSWERS other sessions answered already."""
        poll = self.poll(code, poll_id)
        if poll is None or poll.status != "open":
            raise PollClosed("This poll is closed: the presenter has revealed the answers or moved on.")
        stored = clean_answer(poll, text)
        name = f"{self._answers(code, poll_id)}/{session_digest(session)}.json"
        before = self._read(name)  # this session's earlier answer, or None
        if before is None and self.count(code, poll_id) >= self.max_answers:
            raise PollFull(f"This poll has taken {self.max_answers} answers, its most.")
        self._write(name, {"answer": stored, "at": time.time()})
        # another server may have revealed the poll, or taken the last answers, between the checks and the write:
        # look again, and take back a write that the frozen answers (or the limit) would leave uncounted
        poll = self.poll(code, poll_id)
        if poll is None or poll.status != "open":
            self._take_back(name, before)
            raise PollClosed("This poll is closed: the presenter has revealed the answers or moved on.")
        if before is None and self.count(code, poll_id) > self.max_answers:
            self._take_back(name, before)
            raise PollFull(f"This poll has taken {self.max_answers} answers, its most.")
        return stored

    def _take_back(self, name: str, before: dict | None) -> None:
        """Put back the session's earlier answer, or remove the one just written when it had none."""
        if before is not None:
            self._write(name, before)
        else:
            self.files.remove(name)

    def answer_of(self, code: str, poll_id: str, session: str) -> str | None:
        data = self._read(f"{self._answers(code, poll_id)}/{session_digest(session)}.json")
        answer = data.get("answer") if data else None
        return answer if isinstance(answer, str) else None

    def note_question(self, code: str, session: str, question: str) -> None:
        """A learner who followed room `code` asked a question of their own: counted once per session and question
        (a file named by a digest of both; neither is kept), at most MAX_QUESTIONS per room."""
        if not self.rooms.room(code) or self.questions_asked(code) >= MAX_QUESTIONS:
            return
        digest = hashlib.sha256(f"{session_digest(session)}|{question}".encode("utf-8", "surrogatepass"))
        name = f"{self._folder(code)}/asked/{digest.hexdigest()[:32]}.json"
        if self._read(name) is None:
            self.files.write(name, {"at": time.time()})  # not kept (no file, no Redis): a summary's count, no error

    def questions_asked(self, code: str) -> int:
        """How many questions learners who followed the room asked (a count: no name, no text)."""
        return len(self.files.names(f"{self._folder(code)}/asked"))

    def answered_by(self, session: str) -> list[tuple[str, Poll, str]]:
        """Every poll this learner session answered, in any room this store keeps: (room code, poll, the answer as
        stored), in the order the polls were opened. Found by the session's digest (the rooms' polls listed; a poll
        is read only where this session answered it)."""
        leaf = f"{session_digest(session)}.json"
        found = []
        for code in [f[len("polls-"):] for f in self.files.folders() if f.startswith("polls-")]:
            if not CODE.fullmatch(code):
                continue
            ids = [n[len("poll-"):-len(".json")] for n in self.files.names(self._folder(code)) if n.startswith("poll-")]
            for poll_id in filter(POLL_ID.fullmatch, ids):
                answer = self._read(f"{self._answers(code, poll_id)}/{leaf}")
                poll = self.poll(code, poll_id) if answer and isinstance(answer.get("answer"), str) else None
                if poll is not None:
                    found.append((code, poll, answer["answer"]))
        return sorted(found, key=lambda f: f[1].opened_at)

    # -- reading --------------------------------------------------------------------------------------------
    def count(self, code: str, poll_id: str) -> int:
        """How many sessions have answered (a listing; no answer is read)."""
        return len(self.files.names(self._answers(code, poll_id)))

    def answers(self, code: str, poll_id: str) -> list[str]:
        folder = self._answers(code, poll_id)
        answers = [self._read(f"{folder}/{n}") for n in self.files.names(folder)[:self.max_answers]]
        return [a["answer"] for a in answers if a and isinstance(a.get("answer"), str)]

    def poll(self, code: str, poll_id: str) -> Poll | None:
        if not (CODE.fullmatch(code or "") and POLL_ID.fullmatch(poll_id or "")):
            return None
        data = self._read(f"{self._folder(code)}/poll-{poll_id}.json")
        return Poll.from_json(data) if data else None

    def current(self, code: str) -> Poll | None:
        """The room's poll that is not closed (open or revealed), or None."""
        if not CODE.fullmatch(code or ""):
            return None
        pointer = self._read(f"{self._folder(code)}/current.json")
        poll = self.poll(code, str(pointer.get("poll"))) if pointer else None
        return poll if poll is not None and poll.status != "closed" else None

    def polls(self, code: str) -> list[Poll]:
        """Every poll of the room, in the order they were opened (the room summary)."""
        if not CODE.fullmatch(code or ""):
            return []
        names = [n for n in self.files.names(self._folder(code)) if n.startswith("poll-")]
        found = [self.poll(code, n[len("poll-"):-len(".json")]) for n in names]
        return sorted((p for p in found if p is not None), key=lambda p: p.opened_at)

    def _poll_or_raise(self, code: str, poll_id: str) -> Poll:
        poll = self.poll(code, poll_id)
        if poll is None:
            raise ValueError(f"room {code} has no poll {str(poll_id)[:20]}")
        return poll

    def _save(self, code: str, poll: Poll) -> None:
        self._write(f"{self._folder(code)}/poll-{poll.id}.json", poll.to_json())


def _with(poll: Poll, **changes) -> Poll:
    return Poll(**{**poll.to_json(), **changes})


def poll_store() -> PollStore:
    """The polls of the server's rooms (read at each call: a test stands another room store in)."""
    from pipeline.server import room

    return PollStore(room.room_store())
