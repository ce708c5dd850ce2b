"""Where identical greedy requests part: the counting behind temperature_zero.py, plain Python on plain lists.

Given each run's chosen tokens, the few best scores it saw at each step and the batch it was in at each step:
how many distinct completions, how many runs gave each (the histogram, most common first), and for every run
that does not give the most common completion, the first step where it departs from it, with the two tokens'
scores there (its own, and those of a reference run that gave the most common completion). The near-tie is
read at the reference's top two tokens: at each step, the largest difference of those two scores between the
reference and any run that had the same tokens so far (so the same question was asked at that step).

    t = tally(tokens, tops, mixes)   # t.distinct, t.completions[0].count, t.variants[i].parted_at
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from pipeline.core.common_prefix import first_difference

TopScores = tuple[list[int], list[float]]  # one step's best token ids and their scores (logits), best first
Pass = tuple[int, int, int]  # one pass a run was in: (rows in the pass, its own row, its padding positions)


@dataclass(frozen=True)
class Completion:
    count: int
    token_ids: list[int]
    parted_at: int | None  # the first step where it differs from the most common completion; None for that one
    text: str = ""


@dataclass(frozen=True)
class Variant:
    """One run of the request: the completion it gave and, when that is not the most common one, where it left it."""

    index: int  # the run's number, in the order the runs were admitted
    completion: int  # its completion's place in the histogram (0: the most common)
    parted_at: int | None
    chosen: int | None  # its token at parted_at ...
    expected: int | None  # ... and the most common completion's
    own_lead: float | None  # its score of `chosen` minus its score of `expected` at parted_at (> 0: why it chose it)
    reference_lead: float | None  # the reference run's score of `expected` minus its score of `chosen` there
    passes: list[Pass]  # step s's token came from passes[s] (step 0's: the prefill, rows prefilled together)


@dataclass(frozen=True)
class Tally:
    runs: int
    distinct: int
    completions: list[Completion]  # the histogram, most common first (ties: the first run's order)
    variants: list[Variant]
    reference: int  # the run whose scores the others are compared with (the first to give the most common one)
    reference_gap: list[float | None]  # per step: the reference's best score minus its second best
    top2_spread: list[float]  # per step: largest |score - reference's| at the reference's top two tokens, over
    #                           the runs with the most common completion's tokens so far (0 where none or all equal)
    missing_scores: int  # (run, step) pairs where a run's kept scores lacked one of those two tokens

    @property
    def parted_at(self) -> dict[int, int]:
        """{step: how many runs first departed from the most common completion there}."""
        return dict(sorted(Counter(v.parted_at for v in self.variants if v.parted_at is not None).items()))

    @property
    def largest_top2_difference(self) -> float:
        return max(self.top2_spread, default=0.0)

    @property
    def distinct_mixes(self) -> int:
        """How many different batch histories the runs had (the whole list of passes each was in)."""
        return len({tuple(v.passes) for v in self.variants})

    def to_json(self, variants: bool = True) -> dict:
        out = {"runs": self.runs, "distinct": self.distinct, "completions": [asdict(c) for c in self.completions],
               "parted_at": {str(k): n for k, n in self.parted_at.items()}, "reference": self.reference,
               "reference_gap": self.reference_gap, "top2_spread": self.top2_spread,
               "largest_top2_difference": self.largest_top2_difference, "missing_scores": self.missing_scores,
               "distinct_mixes": self.distinct_mixes, "mix_range": mix_range(self.variants)}
        if variants:
            out["variants"] = [asdict(v) | {"passes": [list(p) for p in v.passes]} for v in self.variants]
        return out


def mix_range(variants: list[Variant]) -> dict:
    """The extremes of the batches the runs went through: rows in a pass, a run's own row, its padding."""
    passes = [p for v in variants for p in v.passes[1:]]  # decode passes (the prefill's is its group)
    groups = [v.passes[0][0] for v in variants if v.passes]
    if not passes:
        return {"batch_sizes": [0, 0], "rows": [0, 0], "padding": [0, 0], "prefill_groups": [0, 0]}
    pick = lambda i: [min(p[i] for p in passes), max(p[i] for p in passes)]  # noqa: E731
    return {"batch_sizes": pick(0), "rows": pick(1), "padding": pick(2), "prefill_groups": [min(groups), max(groups)]}


def score_of(top: TopScores, token: int) -> float | None:
    ids, values = top
    return values[ids.index(token)] if token in ids else None


def _lead(top: TopScores, first: int, second: int) -> float | None:
    a, b = score_of(top, first), score_of(top, second)
    return None if a is None or b is None else a - b


def tally(tokens: list[list[int]], tops: list[list[TopScores]], passes: list[list[Pass]]) -> Tally:
    """tokens[i]: run i's chosen ids; tops[i][s]: its best scores before choosing step s's token; passes[i][s]:
    the batch that step's scores came from. Every run is the same request, so any difference is the batch's."""
    if not tokens:
        raise ValueError("tally needs at least one run")
    counts = Counter(tuple(t) for t in tokens)
    first_seen = {}
    for i, t in enumerate(tokens):
        first_seen.setdefault(tuple(t), i)
    order = sorted(counts, key=lambda c: (-counts[c], first_seen[c]))
    mode = list(order[0])
    place = {c: k for k, c in enumerate(order)}
    reference = first_seen[order[0]]
    ref_tops = tops[reference]
    completions = [Completion(counts[c], list(c), first_difference(list(c), mode)) for c in order]
    variants, spread, missing = [], [0.0] * len(mode), 0
    ref_gap = [(top[1][0] - top[1][1]) if len(top[1]) > 1 else None for top in ref_tops]
    for i, t in enumerate(tokens):
        parted = first_difference(t, mode)
        shared = len(mode) if parted is None else min(parted + 1, len(mode), len(t))  # steps asked the same
        for s in range(shared):
            for token in ref_tops[s][0][:2]:
                own, ref = score_of(tops[i][s], token), score_of(ref_tops[s], token)
                if own is None:
                    missing += 1
                else:
                    spread[s] = max(spread[s], abs(own - ref))
        chosen = expected = own_lead = ref_lead = None
        if parted is not None and parted < min(len(t), len(mode)):
            chosen, expected = t[parted], mode[parted]
            own_lead, ref_lead = _lead(tops[i][parted], chosen, expected), _lead(ref_tops[parted], expected, chosen)
        variants.append(Variant(i, place[tuple(t)], parted, chosen, expected, own_lead, ref_lead,
                                [tuple(p) for p in passes[i]]))
    return Tally(len(tokens), len(counts), completions, variants, reference, ref_gap, spread, missing)
