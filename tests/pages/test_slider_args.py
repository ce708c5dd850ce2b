"""views/slider_args.py: each generation option's range, as st.slider's and st.number_input's arguments, makes a widget
that offers exactly that range (the pipeline's option_ranges), in a real Streamlit script."""
from streamlit.testing.v1 import AppTest

from pipeline.stages.request import Range, option_ranges
from views.request.slider_args import slider_args


def test_slider_args_names_the_range_as_streamlit_does():
    assert slider_args(Range(0.0, 2.0, 0.01)) == {"min_value": 0.0, "max_value": 2.0, "step": 0.01}
    assert slider_args(Range(1, 256)) == {"min_value": 1, "max_value": 256, "step": 1}


def _widgets():
    import streamlit as st

    from pipeline.stages.request import option_ranges
    from views.request.slider_args import slider_args

    for name, allowed in option_ranges(49_152).items():
        widget = st.number_input if name in ("top_k", "seed") else st.slider
        widget(name, **slider_args(allowed), key=name)


def test_each_widget_offers_the_option_range():
    at = AppTest.from_function(_widgets).run()
    assert not at.exception
    for name, allowed in option_ranges(49_152).items():
        widget = at.number_input(key=name) if name in ("top_k", "seed") else at.slider(key=name)
        assert (widget.min, widget.max, widget.step) == (allowed.lo, allowed.hi, allowed.step), name
        assert widget.value == allowed.lo  # Streamlit's default: the low end, a value the request accepts
