"""Token chips coloured by a signed score (input attribution): red pushes the prediction up, blue down."""
from __future__ import annotations

from .escape import html_text
from .more_below import fold


def heat_colour(value: float, scale: float) -> str:
    """value in [-scale, scale] -> a background: white at 0, red for positive, blue for negative."""
    x = 0.0 if scale <= 0 else max(-1.0, min(1.0, value / scale))
    if x >= 0:
        return f"rgba(220,38,38,{0.85 * x:.3f})"
    return f"rgba(37,99,235,{0.85 * -x:.3f})"


def heat_chips(labels: list[str], values, shown: int | None = 240) -> str:
    """One chip per token, its label escaped, its score in the tooltip, coloured against the largest |score|;
    past `shown` chips the rest fold under "N more tokens below"."""
    values = [float(v) for v in values]
    scale = max((abs(v) for v in values), default=0.0)
    chips = fold([
        f"<span title='{html_text(f'{i}: {label} ({v:+.3f})')}' style='display:inline-block;background:"
        f"{heat_colour(v, scale)};border:1px solid #cbd5e1;border-radius:6px;padding:1px 5px;margin:2px;"
        f"font-family:monospace;font-size:0.9em;color:#111;white-space:pre'>{html_text(label)}</span>"
        for i, (label, v) in enumerate(zip(labels, values))], shown)
    return f"<div style='line-height:1.9'>{chips}</div>"
