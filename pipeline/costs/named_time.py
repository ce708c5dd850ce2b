"""A time named by what it measured: the quantity (TTFT, TPOT, a prefill pass, a decode step) and the path
it ran on. The same request's TPOT is about 175 ms on the captured run (recording hooks on every layer) and
about 40 ms on the plain serving path: two different measurements, never one figure. Every page that shows
TTFT or TPOT takes it (or its label) from here, and a ratio is only formed between times of the same path
(Generation's interleaved comparison of the two paths is the one place both are measured side by side).

A request's TTFT and TPOT have one definition, `served_times`: from its arrival to its first token, and the mean
gap between its tokens after the first. The queue's schedule computes them with it from the queue's clock and
records them on the request's Trace (pipeline.run.record.Timings) with the path that ran its prefill and the one
that ran its decode steps; a run made outside the server uses its own clock. Pages read them with `ttft` and
`tpot`, named by those recorded paths. Loading the model is not in TTFT: it happens once per server, before the
request arrives.

    t = tpot(trace)                   # NamedTime('TPOT', 'batched', 0.084): its steps ran in the server's batch
    t.name                            # 'TPOT, batched decode'
    time_label("TPOT", PLAIN)              # 'TPOT (plain path)'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple, TypeVar

from pipeline.core.errors import InputError

T = TypeVar("T")

CAPTURED, PLAIN, BATCHED = "captured", "plain", "batched"
PATH_NAMES = {
    CAPTURED: "captured run (recording hooks on)",  # pipeline.run.trace: every layer's tensors kept, eager attention
    PLAIN: "plain serving path",  # pipeline.faster.fast_path: no captures, one cache for the whole answer
    BATCHED: "batched decode",  # pipeline.costs.batched: B requests in one pass
}
PATH_SHORT = {CAPTURED: "captured run", PLAIN: "plain path", BATCHED: "batched"}
MEANS = {  # what a request's TTFT and TPOT measure (served_times), for a metric's help
    "TTFT": "From the request's arrival in the server's queue (a run made alone: its start) to its first token: "
            "its wait in line, its prompt's pass, its first step. Loading the model comes before, once per server, "
            "and is not in it",
    "TPOT": "The mean gap between two of the request's tokens after the first (the steps of everyone in its batch "
            "included)",
}


def time_label(quantity: str, path: str) -> str:
    """Short enough for a metric's label or a table's column: 'TPOT (captured run)'."""
    return f"{quantity} ({PATH_SHORT[path]})"


@dataclass(frozen=True)
class NamedTime:
    quantity: str  # 'TTFT', 'TPOT', 'prefill pass', 'decode step'
    path: str  # CAPTURED, PLAIN or BATCHED
    seconds: float
    low: float | None = None  # the range over repeats, when measured more than once
    high: float | None = None
    device: str | None = None  # where it ran, as pipeline.costs.ceilings.device_name says, when recorded

    def __post_init__(self):
        if self.path not in PATH_NAMES:
            raise InputError("path", f"{self.path!r} is not a measured path: one of {', '.join(PATH_NAMES)}.")

    @property
    def name(self) -> str:
        """'TPOT, captured run (recording hooks on)'"""
        return f"{self.quantity}, {PATH_NAMES[self.path]}"

    @property
    def label(self) -> str:
        return time_label(self.quantity, self.path)

    @property
    def help(self) -> str:
        """What it measured and what ran it: 'The mean gap ... Ran on: batched decode, cpu (x86_64, 2 threads).'"""
        means = MEANS.get(self.quantity, self.quantity)
        return f"{means}. Ran on: {PATH_NAMES[self.path]}" + (f", {self.device}" if self.device else "") + "."

    @property
    def shown(self) -> str:
        return shown(self.seconds)


def shown(seconds: float) -> str:
    """How every page writes a time: '175 ms' under a second, '1.24 s' from there on."""
    return f"{seconds * 1e3:,.0f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def served_times(arrived_at: float, first_token_at: float, last_token_at: float, tokens: int
                 ) -> tuple[float, float | None]:
    """(TTFT, TPOT) of a request from one clock's readings: arrival -> first token, and the mean gap between its
    tokens after the first (None with one token). arrived 0, first 1.5, last 2.1, 4 tokens -> (1.5, 0.2)."""
    ttft = first_token_at - arrived_at
    return ttft, (last_token_at - first_token_at) / (tokens - 1) if tokens > 1 else None


def ttft(trace) -> NamedTime:
    """The run's TTFT as recorded on it, named by the path its prefill ran on."""
    return NamedTime("TTFT", trace.timings.prefill_path, trace.timings.ttft_s, device=trace.timings.device)


def tpot(trace) -> NamedTime | None:
    """The run's TPOT as recorded on it, named by the path its decode steps ran on (None: a one-token answer)."""
    t = trace.timings.tpot_s
    return None if t is None else NamedTime("TPOT", trace.timings.decode_path, t, device=trace.timings.device)


def captured_prefill(trace) -> NamedTime:
    return NamedTime("prefill pass", CAPTURED, trace.timings.prefill_s)


def plain_ttft(answer) -> NamedTime:
    """An answer of pipeline.faster.fast_path (the plain serving path)."""
    return NamedTime("TTFT", PLAIN, answer.ttft_s)


def plain_tpot(answer) -> NamedTime | None:
    t = answer.tpot_s
    return None if t is None else NamedTime("TPOT", PLAIN, t)


def of_runs(quantity: str, path: str, runs: list[float] | tuple[float, ...]) -> NamedTime:
    """The median of repeated runs of one path, with their range."""
    import statistics

    if not runs:
        raise InputError("timing", "give at least one measured time.")
    return NamedTime(quantity, path, statistics.median(runs), min(runs), max(runs))


class ServedAs(NamedTuple):
    """How runs were served, the key their times are grouped by: the names of TTFT and TPOT (the paths of the
    prefill and of the decode steps), the device and the model."""
    ttft_label: str
    tpot_label: str
    device: str
    model: str | None


def grouped_by_serving(items: Iterable[T], served_as: Callable[[T], ServedAs]) -> list[tuple[ServedAs, list[T]]]:
    """`items` grouped by how each was served, the largest group first (ties in order of first appearance): times of
    different models, paths or devices are never pooled into one figure (a server holds both models' runs)."""
    groups: dict[ServedAs, list[T]] = {}
    for item in items:
        groups.setdefault(served_as(item), []).append(item)
    return sorted(groups.items(), key=lambda group: -len(group[1]))
