"""Prefill & decode, section 4: temperature 0 under batching. One request decoded alone and as one row of a padded
batch, the logits compared step by step (pipeline/costs/determinism.py), the flips said where the lead was within
the noise."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.model.interface import LanguageModel
from pipeline.server.run_queue import DECODE_STEP_COST
from pipeline.text.token_names import token_text
from ui.words import plural
from views.links.controls import linked
from views.links.params import integer
from views.server.waiting import result_through_queue

DET_STEPS = 12  # decode steps compared


def batch_determinism(lm: LanguageModel, n_prompt: int, device: str) -> None:
    """The slider of other requests, the button, and the comparison once asked (n_prompt: the run's prompt tokens,
    for the queue's cost; device: where the run was made)."""
    st.subheader("4. Temperature 0 under batching")
    st.markdown("Greedy decoding always takes the top token, so one request should always get the same answer. But "
                "inside a batch its row is computed by other kernels: a matrix multiply over more rows may add its "
                "products in another order, and the padded row's attention runs over a longer, masked key axis. "
                "Floating-point addition is not associative, so the logits can move by a hair, and a near-tie can "
                "flip.")
    others = linked(st.slider, "pd_others", integer(1, 31), "Other requests in the batch", 1, 31, 7)
    if st.button("Compare alone vs in the batch", key="pd_det"):
        st.session_state["pd_det_n"] = others
    asked_n = st.session_state.get("pd_det_n")
    if not asked_n:
        return
    from pipeline.costs.determinism import determinism

    det = result_through_queue(("determinism", asked_n, DET_STEPS), lambda: determinism(lm, asked_n, DET_STEPS),
                               cost=2 * (asked_n + 1) * (n_prompt + DET_STEPS * DECODE_STEP_COST))
    c1, c2, c3 = st.columns(3)
    c1.metric("Largest logit difference", f"{det.max_abs_logit_diff:.2g}")
    c2.metric("Steps where the choice flips", f"{len(det.flips)} of {len(det.per_step)}")
    c3.metric("Answers part at", "never" if det.parted_at is None else f"step {det.parted_at}")
    fig = go.Figure(go.Bar(x=list(range(len(det.per_step))), y=[max(d, 1e-12) for d in det.per_step]))
    fig.update_layout(height=260, margin=dict(l=10, r=10, t=10, b=10), yaxis=dict(type="log", title="max |Δ logit|"),
                      xaxis_title="decode step")
    st.plotly_chart(fig, width="stretch")
    if det.flips:
        names = lambda t: token_text(lm.tokenizer, t)  # noqa: E731 - readable text; a table cell shows it literally
        st.dataframe(pd.DataFrame([{"step": f.step, "alone": names(f.alone_token), "in the batch": names(f.batch_token),
                                    "lead alone": f"{f.gap_alone:.2g}", "lead in the batch": f"{f.gap_batch:.2g}"}
                                   for f in det.flips]), hide_index=True)
    st.markdown(f"The request's row was padded by {plural(det.padding, 'position')} inside a batch of "
                f"{det.batch_size}; it was fed the alone run's tokens, so every step compares the same question. "
                + ("No chosen token flipped: every step's lead was larger than the noise." if not det.flips else
                   "Each flip came where the alone run's lead over the runner-up was within the noise."))
    if device.startswith("cuda"):
        st.caption("On this GPU the batched pass uses cuBLAS matrix multiplies whose split of the inner sum depends on "
                   "the number of rows, and fused attention kernels: they are not batch-invariant by default, which "
                   "is what the difference above measures.")
    else:
        st.caption("Measured on a CPU. On a GPU the same check tells whether the kernels in use are batch-invariant: "
                   "the matrix multiplies (cuBLAS picks a different split of the inner sum by batch size) and the "
                   "attention kernel (flash attention splits by sequence length). Batch-invariant kernels give a "
                   "difference of exactly 0 at every step.")
