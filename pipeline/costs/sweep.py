"""Batching measured: B = 1, 2, 4, ... real requests decoded together, total tokens/s and each user's
ms per token. Batch sizes are interleaved (all sizes once, then again in reverse order, ...) so the
machine's load hits them alike; each point is the median of the repeats' median step times, with the range.

The roofline says what to expect: a decode step reads every weight once however many rows it carries,
so while the weights dominate the bytes, B rows cost about the time of one ("one read, dozens of
tokens") and tokens/s grows with B; once B rows' FLOPs (and their KV reads) outweigh the one read of the
weights, each step takes longer in proportion and tokens/s stops growing: the curve bends.

`sweep_steps` is the same measurement as a long job of short chunks (pipeline.core.long_jobs): one batch size of one
repeat per chunk (each point's step times are taken inside its chunk, so other work between chunks does not
enter them).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from pipeline.core.checks import integer, shown, typed_count
from pipeline.core.errors import InputError
from pipeline.core.long_jobs import Progress, Steps, run_to_end
from pipeline.costs.batched import decode_rows, request_ids
from pipeline.costs.ceilings import Ceilings
from pipeline.costs.pass_costs import PassCost, decode_cost
from pipeline.model.interface import LanguageModel

BATCH_SIZES = (1, 2, 4, 8, 16, 32)  # what a CPU sweeps: its curve has bent well before 32
GPU_BATCH_SIZES = BATCH_SIZES + (64, 128, 256, 512)  # a GPU's step costs about the same far past 32 (H200, 2026-12-04)
MAX_BATCH = 512


def batch_sizes(device: str) -> tuple[int, ...]:
    """The batch sizes the sweep offers on a device ('cpu', 'cuda:0')."""
    return GPU_BATCH_SIZES if str(device).startswith("cuda") else BATCH_SIZES


@dataclass(frozen=True)
class Point:
    batch_size: int
    step_s: float  # median over repeats of each repeat's median decode-step time
    step_range: tuple[float, float]
    past: int  # positions before the steps (the longest prompt, about)
    cost: PassCost  # of one step, all rows
    predicted_step_s: float | None  # the roofline's bound: max(FLOPs / compute roof, bytes / memory roof)

    @property
    def tokens_per_s(self) -> float:
        return self.batch_size / self.step_s

    @property
    def ms_per_token_per_user(self) -> float:
        return 1e3 * self.step_s

    def to_json(self) -> dict:
        return {"batch_size": self.batch_size, "tokens_per_s": self.tokens_per_s,
                "ms_per_token_per_user": self.ms_per_token_per_user, "step_s": self.step_s,
                "step_s_range": list(self.step_range), "flops_per_step": self.cost.flops,
                "bytes_per_step": self.cost.bytes,
                "predicted_step_s": self.predicted_step_s}


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); each a whole number from 1 to MAX_BATCH (512), no repeats."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        raise InputError("batch_sizes", f"{shown(text)} must be whole numbers separated by commas, e.g. 1,2,4,8.")
    sizes = [typed_count("batch_sizes", p, "a batch size", MAX_BATCH) for p in parts]
    if 0 in sizes:
        raise InputError("batch_sizes", f"a batch size must be from 1 to {MAX_BATCH}, got 0.")
    if len(set(sizes)) != len(sizes):
        raise InputError("batch_sizes", "name each batch size once.")
    return tuple(sorted(sizes))


def sweep(lm: LanguageModel, batch_sizes=BATCH_SIZES, steps: int = 8, repeats: int = 3,
          roof: Ceilings | None = None) -> list[Point]:
    return run_to_end(sweep_steps(lm, batch_sizes, steps, repeats, roof))


def sweep_steps(lm: LanguageModel, batch_sizes=BATCH_SIZES, steps: int = 8, repeats: int = 3,
                roof: Ceilings | None = None) -> Steps[list[Point]]:
    """sweep as a long job: the arguments are checked now, then each (repeat, batch size) is a chunk."""
    integer("steps", steps, 2, 1000)
    integer("repeats", repeats, 1, 100)
    sizes = parse_batch_sizes(",".join(map(str, batch_sizes)))
    return _sweep_chunks(lm, sizes, steps, repeats, roof)


def _sweep_chunks(lm: LanguageModel, sizes: tuple[int, ...], steps: int, repeats: int, roof: Ceilings | None):
    prompts = request_ids(lm, max(sizes))
    times: dict[int, list[float]] = {b: [] for b in sizes}
    for r in range(repeats):
        for b in sizes if r % 2 == 0 else sizes[::-1]:
            rows = decode_rows(lm, prompts[:b], steps)
            times[b].append(statistics.median(rows.step_seconds))
            yield Progress(sum(map(len, times.values())), repeats * len(sizes), f"B = {b}, repeat {r + 1} of {repeats}")
    points = []
    for b in sizes:
        past = max(len(p) for p in prompts[:b]) + steps // 2  # the middle of the measured steps
        cost = decode_cost(lm.dims, past, b)
        predicted = max(cost.flops / roof.flops_per_s, cost.bytes / roof.bytes_per_s) if roof else None
        points.append(Point(b, statistics.median(times[b]), (min(times[b]), max(times[b])), past, cost, predicted))
    return points


def doubling_gain(before: Point, after: Point) -> float:
    """What each doubling of B bought between two measured points, in tokens/s: 19 -> 36 over B 2 -> 4 is 1.89x;
    over two doublings (B 1 -> 4) the square root of the whole gain."""
    return (after.tokens_per_s / before.tokens_per_s) ** (1 / math.log2(after.batch_size / before.batch_size))


def bend(points: list[Point], gain: float = 1.5) -> Point | None:
    """The first point from which no doubling of B buys `gain` x the tokens/s any more, each doubling compared
    with the point just before it (None: it kept growing). A slow step that a later doubling makes up for is the
    machine's noise, not a bend. [1: 10, 2: 19, 4: 36, 8: 45] -> the point at 8 (4 -> 8 bought 1.25x);
    [.., 8: 45, 16: 75.6, 32: 80] -> the point at 32 (8 -> 16 bought 1.68x: no bend at 8)."""
    for k in range(1, len(points)):
        if all(doubling_gain(points[j - 1], points[j]) < gain for j in range(k, len(points))):
            return points[k]
    return None


@dataclass(frozen=True)
class Fall:
    """A larger batch measured faster per user than a smaller one: impossible in the work it does (a step over more
    rows does at least a smaller step's work), so it is the machine's noise."""

    before: Point  # the smaller batch, the slower step
    after: Point  # the larger batch, measured faster

    @property
    def within_spread(self) -> bool:
        """The two ranges of repeats overlap: the fall is inside what repeating the same size moved by."""
        return self.after.step_range[1] >= self.before.step_range[0]


def impossible_falls(points: list[Point]) -> list[Fall]:
    """Each point whose step (each user's time per token) came out faster than a smaller batch's, against the slowest
    smaller one. [B 1: 20 ms, 2: 21 ms, 4: 18 ms] -> [Fall(B 2, B 4)]."""
    falls = []
    for j, p in enumerate(points):
        slowest = max(points[:j], key=lambda q: q.step_s, default=None)
        if slowest is not None and p.step_s < slowest.step_s:
            falls.append(Fall(slowest, p))
    return falls
