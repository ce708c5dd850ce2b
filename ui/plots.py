"""Plotly settings every page shares: tick labels a room can read from the back."""
from __future__ import annotations

import math

TICK_FONT = dict(size=13)  # projector-readable; plotly's default is 12 and the old rotated 9 px was not
MAX_TICKS = 40  # token labels drawn on one axis; the rest are thinned out (all stay in the hover text)


def token_axis(fig, axis: str, labels: list[str], max_ticks: int = MAX_TICKS, angle: int | None = None,
               always=(), **kw) -> None:
    """Show at most `max_ticks` of a category axis's labels, evenly spaced, keeping the last and the indices in
    `always` (e.g. a summed column) first, the later ones of them first, as long as no two kept labels are closer
    than the spacing (five sink columns side by side drew one pile of labels; at half the spacing the first token
    and the summed column of a long prompt's attention still overlapped).

    labels: the axis's categories (already escaped, unique). axis: 'x' or 'y'.
    """
    n = len(labels)
    step = max(1, -(-n // max_ticks))
    gap = step
    keep: list[int] = []
    for i in [i for i in reversed(list(always)) if 0 <= i < n] + list(range(n - 1, -1, -step)):
        if all(abs(i - k) >= gap for k in keep):
            keep.append(i)
    keep.sort()
    update = dict(tickmode="array", tickvals=[labels[i] for i in keep], ticktext=[labels[i] for i in keep],
                  tickfont=TICK_FONT, type="category", **kw)
    if angle is not None:
        update["tickangle"] = angle
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**update)


def step_axis(fig, axis: str, labels: list[str], angle: int = -60, **kw) -> None:
    """A category axis of token labels whose ticks plotly thins to the axis's drawn length, so that they never
    overlap at any page width (token_axis keeps a fixed count: 40 labels piled up in a narrow column). Every
    label stays in the hover text. labels: the axis's categories (already escaped, unique). axis: 'x' or 'y'."""
    update = dict(tickmode="auto", nticks=0, type="category", categoryorder="array", categoryarray=labels,
                  tickfont=TICK_FONT, tickangle=angle, **kw)
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**update)


def log_axis(values, title: str, **kw) -> dict:
    """A log axis ticked at 1, 2 and 5 times the powers of ten that span `values` (every label a plain number:
    plotly's own minor labels read "10, 2, 3" for 10, 20, 30 over a short range).

    >>> log_axis([3, 60], "t")["tickvals"]
    [2, 5, 10, 20, 50, 100]
    """
    positive = [v for v in values if v > 0]
    if not positive:
        return dict(type="log", title=title, **kw)
    lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    ticks = [m * 10 ** e for e in range(lo, hi + 1) for m in (1, 2, 5)]
    first = max([t for t in ticks if t <= min(positive)], default=ticks[0])
    last = min([t for t in ticks if t >= max(positive)], default=ticks[-1])
    ticks = [round(t, 12) for t in ticks if first <= t <= last]
    ticks = [int(t) if t >= 1 else t for t in ticks]
    return dict(type="log", title=title, tickvals=ticks, ticktext=[f"{t:,}" if t >= 1 else f"{t:g}" for t in ticks],
                tickfont=TICK_FONT, **kw)
