"""What a verify pass records (`Round`) and the option's bounds: plain values, no torch, so a page that shows
speculative decoding's rounds imports without it."""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.errors import InputError

MAX_DRAFTS = 16  # the most drafts a pass checks (the option's upper bound)


@dataclass(frozen=True)
class Round:
    """One verify pass: the token fed, the drafts checked with it, and how many of them the model agreed with."""

    step: int  # the answer's step (index into its tokens) of the token fed
    token: int
    drafts: tuple[int, ...]
    accepted: int  # drafts[:accepted] are the model's own greedy choices; drafts[accepted:] were rolled back

    @property
    def rejected(self) -> tuple[int, ...]:
        return self.drafts[self.accepted:]


def check_drafts(k, field: str = "speculative") -> int:
    """Draft tokens per pass, 1 to MAX_DRAFTS; `field` names where they came from (the CLI's --drafts)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DRAFTS:
        raise InputError(field, f"draft tokens per pass must be an integer from 1 to {MAX_DRAFTS}, got {k!r}.")
    return k
