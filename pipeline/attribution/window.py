"""The positions attribution reads when a step has more than it can hold (record.MAX_POSITIONS).

A step over the limit is attributed on a shorter text: its first token (where the model parks spare attention:
Gemma's <bos>, SmolLM2's first <|im_start|>) and the last MAX_POSITIONS - 1 tokens, the ones just before the
prediction. The tokens in between are left out: the model then reads this shorter text, so its scores are close
to the run's but not the same (the page says both).
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.attribution.record import MAX_POSITIONS
from pipeline.core.errors import InputError


@dataclass(frozen=True)
class Window:
    ids: list[int]  # what attribution runs on
    positions: tuple[int, ...]  # each one's position in the step's full ids
    total: int  # how many ids the step has

    @property
    def left_out(self) -> int:
        """How many of the step's positions attribution does not read."""
        return self.total - len(self.ids)

    @property
    def left_out_span(self) -> tuple[int, int] | None:
        """(first, last) position left out, both included; None if nothing is."""
        return (1, self.total - len(self.ids)) if self.left_out else None

    def index_of(self, position: int) -> int | None:
        """Where the step's `position` sits in the window's ids; None if it was left out."""
        if position == 0 or position > self.total - len(self.ids):
            return position - self.left_out if position else 0
        return None


def attribution_window(ids: list[int], most: int = MAX_POSITIONS) -> Window:
    """All of `ids` if they fit in `most` positions; else the first one and the last `most` - 1."""
    if most < 2:
        raise InputError("most", f"must be at least 2 positions, got {most}.")
    ids = list(ids)
    if len(ids) <= most:
        return Window(ids, tuple(range(len(ids))), len(ids))
    positions = (0, *range(len(ids) - most + 1, len(ids)))
    return Window([ids[p] for p in positions], positions, len(ids))
