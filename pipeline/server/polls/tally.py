"""The class's answers to a poll, counted beside the model's real figure: the rows the class view, the room summary
and its CSV all draw.

A row is one answer the class gave (or the model's, with 0 votes): how many gave it, the model's own figure for it
where the kind has one (a token's probability, a position's attention weight), and whether it is the real answer.
Next token's free text is matched to the model's 8 best tokens by its text, spaces and case aside ('paris' is
'␣Paris'); other answers are rows of their own:

    class_view(poll with top [␣Paris 0.6, ␣the 0.1, ...], ["Paris", " paris", "Lyon"])
      -> [Row("␣Paris", 2, 0.6, True), Row("␣the", 0, 0.1, False), ..., Row("Lyon", 1, None, False)]
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pipeline.server.polls.record import NUMBER_KINDS, YES_NO, Poll

MAX_OTHER_ROWS = 12  # next_token: the most frequent answers that are none of the 8 best tokens; the rest in one row
OTHERS = "(other answers)"


@dataclass
class Row:
    answer: str  # as shown: a token's label, a number, yes or no, a position's label
    count: int  # learners who gave it
    model: float | None  # the model's probability (next_token) or attention weight (attention); None otherwise
    real: bool  # the model's real answer


def normalized(text: str) -> str:
    """'␣Paris ' -> 'paris': how a typed guess is matched to a token's text."""
    return text.replace("␣", " ").strip().casefold()


def bucket(poll: Poll, answer: str) -> str:
    """The row an answer falls into (how a learner's own answer is marked on the class view)."""
    if poll.kind == "next_token" and poll.real:
        for c in poll.real["top"]:
            if answer == c["label"] or normalized(c["text"]) and normalized(c["text"]) == normalized(answer):
                return c["label"]
        return answer
    if poll.kind == "attention" and answer.isdigit() and int(answer) < len(poll.choices):
        return poll.choices[int(answer)]
    return answer


def class_view(poll: Poll, answers: list[str]) -> list[Row]:
    """The class's answers counted, with the model's figure (rows in the order the kind reads best)."""
    counts = Counter(bucket(poll, a) for a in answers)
    real = poll.real or {}
    if poll.kind == "next_token":
        top = real.get("top", [])
        rows = [Row(c["label"], counts.pop(c["label"], 0), float(c["probability"]), i == 0) for i, c in enumerate(top)]
        others = counts.most_common()
        rows += [Row(a, n, None, False) for a, n in others[:MAX_OTHER_ROWS]]
        rest = sum(n for _, n in others[MAX_OTHER_ROWS:])
        return rows + ([Row(OTHERS, rest, None, False)] if rest else [])
    if poll.kind in NUMBER_KINDS:
        values = set(counts) | ({real["answer"]} if "answer" in real else set())
        return [Row(v, counts.get(v, 0), None, v == real.get("answer")) for v in sorted(values, key=int)]
    if poll.kind == "temperature":
        return [Row(v, counts.get(v, 0), None, v == real.get("answer")) for v in YES_NO]
    if poll.kind == "attention":
        weights = real.get("weights", [])
        best = int(real["answer"]) if "answer" in real else None
        picked = {i for i, label in enumerate(poll.choices) if label in counts}
        picked |= {best} if best is not None else set()
        return [Row(poll.choices[i], counts.get(poll.choices[i], 0), float(weights[i]) if i < len(weights) else None,
                    i == best) for i in sorted(picked)]
    raise ValueError(f"no poll kind {poll.kind!r}")


def real_answer(poll: Poll) -> str:
    """The model's real answer in words (the class view's caption, the summary's column)."""
    real = poll.real
    if not real:
        return "(not computed)"
    if poll.kind == "next_token":
        return ", ".join(f"{c['label']} {c['probability']:.1%}" for c in real["top"])
    if poll.kind == "tokens":
        return f"{real['count']:,} tokens"
    if poll.kind == "temperature":
        distinct = len(set(real["ids"]))
        said = "all 10 agree" if real["agree"] else f"{distinct} different tokens in 10 draws"
        return f"{said} at temperature {real['temperature']:g} (seed {real['seed']}): " + " ".join(real["draws"])
    if poll.kind == "attention":
        best = int(real["answer"])
        label = poll.choices[best] if best < len(poll.choices) else str(real["position"])
        return f"{label}, weight {real['weights'][best]:.1%} (layer {real['layer']}, head {real['head']})"
    if poll.kind == "prompt_caching":
        return f"{real['reused']:,} of {real['tokens']:,} tokens reused ({real['label']})"
    return ""


def spread(poll: Poll, answers: list[str]) -> dict | None:
    """A number kind's answers as min, median and max (None for other kinds or no answers)."""
    if poll.kind not in NUMBER_KINDS or not answers:
        return None
    values = sorted(int(a) for a in answers if a.isdigit())
    if not values:
        return None
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    return {"min": values[0], "median": median, "max": values[-1]}
