"""A generation option's range as a widget's arguments: st.slider's and st.number_input's min_value, max_value and
step, from the ranges the pipeline checks requests against (pipeline.stages.request.option_ranges)."""
from __future__ import annotations

from pipeline.stages.request import Range


def slider_args(allowed: Range) -> dict:
    """Range(0.0, 2.0, 0.01) -> {"min_value": 0.0, "max_value": 2.0, "step": 0.01}."""
    return {"min_value": allowed.lo, "max_value": allowed.hi, "step": allowed.step}
