"""One poll of a room: its record, its kinds, and what counts as an answer to it.

A poll asks the room one question about the room's request at the presenter's stage; learners answer on their own
screens, and on Reveal the class's answers are shown beside the model's real figure (`real.py`). An answer is short
text, cleaned here before it is stored (bounded, one line; a number kind takes a whole number, a choice kind one of
its choices):

    clean_answer(Poll(kind="tokens", ...), " 42 ") -> "42"
    clean_answer(Poll(kind="next_token", ...), "<b>" + "x" * 10_000) -> "<b>xxx..." (200 characters, stored as text)
"""
from __future__ import annotations

import re
import secrets
import time
from dataclasses import asdict, dataclass, field

from pipeline.core.poll_kinds import KINDS, MAX_QUESTION_CHARS

NUMBER_KINDS = ("tokens", "prompt_caching")
MAX_ANSWER_CHARS = 200  # a guess at a token, a number, a word: a longer text is cut, never refused
MAX_NUMBER = 1_000_000  # a number answer above this is no guess at a prompt of at most 4,096 tokens
MAX_CHOICES = 1024  # an attention poll's positions: the last 1,024 of a longer prompt
POLL_ID = re.compile(r"[0-9a-f]{12}")
YES_NO = ("yes", "no")
DEFAULT_QUESTIONS = {
    "next_token": "What will the model write next? (one token)",
    "tokens": "How many tokens is this prompt, chat template included?",
    "temperature": "At this run's temperature, will 10 draws of the first answer token all agree?",
    "attention": "From the last position, which token does this head look at most?",
    "prompt_caching": "How many tokens of the second request are reused from the prompt cache?",
}


@dataclass
class Poll:
    id: str  # 12 hex digits, random
    kind: str  # one of KINDS
    question: str
    stage: int  # the presenter's stage when it was opened
    query: dict[str, str]  # the room's request when it was opened (its link parameters)
    choices: list[str] = field(default_factory=list)  # attention: one label per position ("(3) the"); next_token:
    # the model's 8 best tokens' labels, shuffled, when learners pick instead of typing
    real: dict | None = None  # the model's figure for this request (`real.py`), shown only after Reveal
    opened_at: float = 0.0
    revealed_at: float | None = None
    closed_at: float | None = None
    revealed_answers: list[str] | None = None  # the class's answers as Reveal froze them

    @property
    def status(self) -> str:
        """'open' (taking answers), 'revealing' (Reveal pressed: no more answers, the class's answers not frozen
        yet: `PollStore.reveal`), 'revealed' (the class view shown), or 'closed'."""
        if self.closed_at:
            return "closed"
        if self.revealed_at:
            return "revealed" if self.revealed_answers is not None else "revealing"
        return "open"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Poll | None:
        """The poll a file holds, or None for anything else (a damaged or foreign file)."""
        try:
            poll = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (TypeError, KeyError):
            return None
        ok = (isinstance(poll.id, str) and POLL_ID.fullmatch(poll.id) and poll.kind in KINDS
              and isinstance(poll.question, str) and isinstance(poll.query, dict) and isinstance(poll.choices, list))
        return poll if ok else None


def new_poll(kind: str, question: str, query: dict[str, str], stage: int = 0, real: dict | None = None,
             choices: list[str] = ()) -> Poll:
    """A poll opened now. ValueError for a kind not in KINDS; an empty question gets its kind's default."""
    if kind not in KINDS:
        raise ValueError(f"a poll's kind is one of {', '.join(KINDS)}, not {str(kind)[:40]!r}")
    question = one_line(str(question or ""))[:MAX_QUESTION_CHARS] or DEFAULT_QUESTIONS[kind]
    return Poll(id=secrets.token_hex(6), kind=kind, question=question, stage=int(stage),
                query={str(k): str(v) for k, v in dict(query).items()},
                choices=[one_line(str(c))[:MAX_ANSWER_CHARS] for c in list(choices)[-MAX_CHOICES:]],
                real=real, opened_at=time.time())


def one_line(text: str) -> str:
    """Line breaks and other control characters as spaces, the ends stripped: 'a\\nb\\t' -> 'a b'."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip()


def clean_answer(poll: Poll, text: str) -> str:
    """The answer as stored. ValueError (said for the learner) for an answer this kind cannot take."""
    text = one_line(str(text))[:MAX_ANSWER_CHARS]
    if not text:
        raise ValueError("The answer is empty.")
    if poll.kind in NUMBER_KINDS:
        if not re.fullmatch(r"\d{1,7}", text.replace(",", "")) or int(text.replace(",", "")) > MAX_NUMBER:
            raise ValueError(f"This poll takes a whole number from 0 to {MAX_NUMBER:,}.")
        return str(int(text.replace(",", "")))
    if poll.kind == "temperature":
        if text.lower() not in YES_NO:
            raise ValueError("This poll takes yes or no.")
        return text.lower()
    if poll.kind == "attention":
        if not (text.isdigit() and int(text) < len(poll.choices)):
            raise ValueError("This poll takes one of the positions offered.")
        return str(int(text))
    if poll.choices and text not in poll.choices:  # next_token, picked among the model's 8 best
        raise ValueError("This poll takes one of the tokens offered.")
    return text  # next_token: free text, matched to the model's tokens when the class view is drawn
