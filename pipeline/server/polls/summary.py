"""The room summary as rows: every poll with the class's answers counted and the model's real answer, and how many
questions learners asked (a count, no names). `summary_csv` writes them; ui/room_summary.py draws them as one
offline HTML file.

One CSV row per (poll, answer): poll, kind, question, answer, learners, model_figure, is_real, answered, real_answer.

A learner's own summary ("My session") has one row per poll they answered (`learner_rows`): the question, their
answer and, once the poll was revealed, the class's answers counted and the real answer:

    learner_rows([(code, revealed tokens poll, "12")])
      -> [{"question": "How many tokens?", "yours": "12", "class": "12: 2, 15: 1 (3 answered)", "real": "14 tokens"}]
"""
from __future__ import annotations

import csv
import io

from pipeline.server.polls.record import Poll
from pipeline.server.polls.tally import bucket, class_view, real_answer

COLUMNS = ("poll", "kind", "stage", "question", "answer", "learners", "model_figure", "is_real", "answered",
           "real_answer")


def poll_answers(poll: Poll, live: list[str]) -> list[str]:
    """The answers a summary counts: as Reveal froze them, or those given so far for a poll never revealed."""
    return poll.revealed_answers if poll.revealed_answers is not None else live


def summary_rows(polls: list[tuple[Poll, list[str]]]) -> list[dict]:
    """polls: (poll, its answers) in the order they were opened."""
    rows = []
    for n, (poll, answers) in enumerate(polls, start=1):
        for row in class_view(poll, answers):
            rows.append({"poll": n, "kind": poll.kind, "stage": poll.stage, "question": poll.question,
                         "answer": row.answer, "learners": row.count,
                         "model_figure": "" if row.model is None else round(row.model, 6),
                         "is_real": "yes" if row.real else "", "answered": len(answers),
                         "real_answer": real_answer(poll)})
    return rows


def learner_rows(answered: list[tuple[str, Poll, str]]) -> list[dict]:
    """One learner's polls (`PollStore.answered_by`): {"question", "yours"} and, after Reveal only, "class" (the
    class's answers as Reveal froze them, counted) and "real" (the model's real answer)."""
    rows = []
    for _, poll, answer in answered:
        row = {"question": poll.question, "yours": bucket(poll, answer) if poll.kind == "attention" else answer}
        if poll.revealed_at is not None and poll.revealed_answers is not None:
            counted = ", ".join(f"{r.answer}: {r.count}" for r in class_view(poll, poll.revealed_answers) if r.count)
            row.update({"class": f"{counted} ({len(poll.revealed_answers)} answered)", "real": real_answer(poll)})
        rows.append(row)
    return rows


def summary_csv(polls: list[tuple[Poll, list[str]]], questions_asked: int) -> str:
    """The room summary as CSV text; its last line counts the questions learners asked."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in summary_rows(polls):
        writer.writerow({k: _safe_cell(v) for k, v in row.items()})
    writer.writerow({"poll": "questions learners asked", "learners": questions_asked})
    return out.getvalue()


def _safe_cell(value):
    """A learner's text opened in a spreadsheet stays text: '=HYPERLINK(...)' -> "'=HYPERLINK(...)"."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@") else value
