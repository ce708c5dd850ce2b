"""The Tensors & batch page: three requests padded into one batch, left or right. AppTest runs the page file on its own
(no app.py sidebar), from the session-state defaults in views/request/session.py, on the tiny random-weight model
(fixture `tiny_app`, fast tier).
"""
import numpy as np
import pandas as pd
import pytest
from kit.apptest import page_app, run_page, shown

pytestmark = pytest.mark.usefixtures("tiny_app")  # AppTest on the tiny model (fast tier)


def test_tensors_batch_pads_three_requests(tiny_app):
    at = run_page("tensors")
    summary = next(df.value for df in at.dataframe if "padding cells" in df.value.columns)
    assert list(summary["tensor"]) == ["input_ids", "position_ids", "attention_mask"]
    assert summary["shape (B, T)"].iloc[0].startswith("(3, ")
    assert set(summary["dtype"]) == {"int64"}
    assert summary["padding cells"].iloc[0] > 0
    assert batch_mask(at)[1][0] == 0  # left padding: the short second request starts with padding
    at.radio(key="batch_side").set_value("right").run()
    assert not at.exception
    mask = batch_mask(at)
    assert mask[1][0] == 1 and mask[1][-1] == 0  # right padding: its padding moved to the end


def batch_mask(at) -> list[list[int]]:
    """The three-request batch's attention_mask grid (the only (3, T) table of zeros and ones)."""
    grids = [df.value for df in at.dataframe if df.value.shape[0] == 3 and df.value.shape[1] > 3
             and all(pd.api.types.is_integer_dtype(d) for d in df.value.dtypes)]  # not the (3, 4) summary table
    masks = [g for g in grids if set(np.unique(g.to_numpy())) <= {0, 1}]
    assert len(masks) == 1, [g.shape for g in grids]
    return masks[0].to_numpy().tolist()


def test_the_tensors_page_cuts_another_users_question_and_draws_a_window_of_a_long_batch():
    """A 5,000-digit question made a batch 5,000 tokens wide: its tables' cells, each styled on the server, kept a
    core busy for a minute (a long prompt of the sidebar's, 3,500 tokens, two)."""
    at = page_app("tensors").run()
    at.text_input(key="batch_q2").set_value("9" * 5_000).run()
    assert not at.exception, at.exception
    assert "Second user's question takes at most 1,000 characters" in shown(at.info)
    assert [df.value.shape for df in at.dataframe][-3:] == [(3, 64)] * 3  # the batch's three tensors
    at.slider(key="batch_from").set_value(900).run()  # the window's start, near the end of the batch
    assert not at.exception, at.exception
    assert at.dataframe[-1].value.columns[0] == "900"
    at.text_input(key="batch_q2").set_value("9" * 100).run()  # a narrower batch: the window starts again
    assert not at.exception, at.exception
    assert at.dataframe[-1].value.columns[0] == "0"
