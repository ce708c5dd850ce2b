"""Plotly settings every page shares: tick labels a room can read from the back."""
from __future__ import annotations

TICK_FONT = dict(size=13)  # projector-readable; plotly's default is 12 and the old rotated 9 px was not
MAX_TICKS = 40  # token labels drawn on one axis; the rest are thinned out (all stay in the hover text)


def token_axis(fig, axis: str, labels: list[str], max_ticks: int = MAX_TICKS, angle: int | None = None,
               always=(), **kw) -> None:
    """Show at most `max_ticks` of a category axis's labels, evenly spaced, always keeping the last
    and the indices in `always` (e.g. a summed column).

    labels: the axis's categories (already escaped, unique). axis: 'x' or 'y'.
    """
    n = len(labels)
    step = max(1, -(-n // max_ticks))
    keep = sorted(set(range(n - 1, -1, -step)) | {i for i in always if 0 <= i < n})
    update = dict(tickmode="array", tickvals=[labels[i] for i in keep], ticktext=[labels[i] for i in keep],
                  tickfont=TICK_FONT, type="category", **kw)
    if angle is not None:
        update["tickangle"] = angle
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**update)
