"""Prefill & decode, temperature 0 at scale: the default question run many times through the room's running batch,
each run beside other requests that come and go (pipeline.costs.temperature_zero), as a long job; how many
different answers came out and where they part."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from pipeline.costs.batched import QUESTIONS
from pipeline.model.interface import LanguageModel
from views.links.controls import linked
from views.links.params import choice
from views.server.long_job import long_job, made_line

RUN_COUNTS = (50, 100, 200, 500)
NEW_TOKENS, MAX_BATCH = 24, 32
SHOWN = 8  # answers listed


def temperature_zero_runs(lm: LanguageModel) -> None:
    from pipeline.costs.temperature_zero import temperature_zero_steps

    st.markdown(f"**At scale.** Ask one question ({QUESTIONS[0]!r}) many times at temperature 0 while other "
                "requests join and leave the batch around it, as in the room: each run sits in a batch of another "
                "size, in another row, behind other padding. Any two different answers were made different by the "
                "batch alone. (Thinking Machines counted 80 different answers in 1,000 runs of a 235B model served "
                "by vLLM, 1,000 tokens each.)")
    n = linked(st.select_slider, "pd_t0_n", choice(RUN_COUNTS), "Times the question runs", RUN_COUNTS,
               value=RUN_COUNTS[1])
    clicked = st.button(f"Run it {n} times ({NEW_TOKENS} tokens each)", key="pd_t0")
    if clicked:
        st.session_state["pd_t0_asked"] = n
    asked = st.session_state.get("pd_t0_asked") or n
    done = long_job(("temperature zero", asked, NEW_TOKENS, MAX_BATCH),
                    lambda: temperature_zero_steps(lm, asked, NEW_TOKENS, MAX_BATCH), f"{asked} greedy runs",
                    start=clicked)
    if done is None:
        return
    r = done.value
    t = r.tally
    sizes = [p[0] for v in t.variants for p in v.passes[1:]] or [0]
    c1, c2, c3 = st.columns(3)
    c1.metric("Different answers", f"{t.distinct} of {t.runs}")
    c2.metric("Batch sizes it ran in", f"{min(sizes)}–{max(sizes)}")
    c3.metric("Largest score difference, top two", f"{t.largest_top2_difference:.2g}",
              help="at each step, the best two tokens' scores (logits), compared between runs that had written "
                   "the same tokens so far")
    st.dataframe(pd.DataFrame([{"runs": c.count, "parts from the most common at step":
                                "—" if c.parted_at is None else c.parted_at, "answer": c.text}
                               for c in t.completions[:SHOWN]]), hide_index=True)
    gaps = [(g, s) for s, g in enumerate(t.reference_gap) if g is not None]
    narrowest = f" The narrowest lead of the best token over the second was {min(gaps)[0]:.2g}, at step " \
                f"{min(gaps)[1]}." if gaps else ""
    st.markdown(("Every run gave the same answer: no step's lead was within the batches' noise." if t.distinct == 1
                 else "The runs that part do so at a near-tie, where the batch's rounding was enough to swap the "
                      "two best tokens; from there on each run continues its own text.") + narrowest)
    st.caption(f"{t.distinct_mixes} different batch histories among {t.runs} runs, beside {r.fillers} other "
               f"requests. " + made_line(done))
