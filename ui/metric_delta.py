"""st.metric's delta arguments for a signed change: coloured and arrowed only when the change as shown is not zero
(a red "+0%" said the bill went up when it had not moved)."""
from __future__ import annotations


def metric_delta(change: float, fmt: str, after: str = "", lower_is_better: bool = False) -> dict:
    """{'delta', 'delta_color', 'delta_arrow'} for st.metric(**...). fmt: how the change is written ('+.0%',
    '+.3f'); after: text that follows it (' vs $0.0123 uncached'). A change that shows as zero ('+0%', '-0.000')
    is written unsigned, grey, with no arrow."""
    shown = format(change, fmt)
    zero = not any(ch in "123456789" for ch in shown)
    return {"delta": (shown.lstrip("+-") if zero else shown) + after,
            "delta_color": "off" if zero else ("inverse" if lower_is_better else "normal"),
            "delta_arrow": "off" if zero else "auto"}
