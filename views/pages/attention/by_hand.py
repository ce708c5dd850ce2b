"""Attention, "by hand": the four steps a head runs (compare, mask, softmax, mix) with its real numbers, on four
tokens picked in the prompt (pipeline/stages/attention.py's attention_by_hand)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from pipeline.model.prefill_record import Prefill
from pipeline.run.record import Trace
from pipeline.stages import attention as at
from ui.words import plural
from views.chrome.frame import fragment
from views.links.controls import declare
from views.links.params import positions


@fragment
def by_hand(trace: Trace, p: Prefill, A: np.ndarray, cols: list, layer: int, head: int, start: int,
            plain: list[str]) -> None:
    """A: (W, C) this head's rows for queries start..T-1 over the drawn key columns; p: the captured pass the grids
    come from; plain: each position's label as text."""
    Dh, window = trace.dims.Dh, trace.dims.window(layer)
    st.subheader("Attention by hand, on four tokens")
    st.caption("The same steps the model runs, with this head's real numbers, but on only four tokens so the grid "
               "fits on screen. Each token's query vector q and key vector k have Dh = "
               f"{Dh} numbers.")
    offered = [c for c in cols if c is not None]  # positions drawn in the grid
    user = [t.index for t in trace.tokens if t.role == "user" and t.index >= start]
    default = user[-4:] if len(user) >= 4 else offered[-4:]
    # one picker per run: the browser keeps a picker's choice by its labels, and the old prompt's labels
    # match nothing in a new one (it showed an empty picker after a new question)
    key = f"at_hand_tokens_{trace.request.id}"
    if declare("at_hand", positions(4), widget=key) and key not in st.session_state:  # a link's four: this picker
        st.session_state[key] = [i for i in st.session_state["at_hand"] if i in offered][:4]
    chosen = st.multiselect("four tokens (in prompt order)", offered, default=default, max_selections=4,
                            format_func=plain.__getitem__, key=key)
    st.session_state["at_hand"] = chosen  # what a link carries (declared above)
    if len(chosen) < 2:
        st.info("Pick at least two tokens.")
        return
    r = at.attention_by_hand(p.q_rot[layer], p.k_rot[layer], p.v[layer], head, chosen, window)
    heads = [plain[i] for i in r["positions"]]
    frame = lambda a, fmt: pd.DataFrame(a, index=heads, columns=heads).map(fmt)  # noqa: E731
    a, b = st.columns(2)
    a.markdown(f"**1. Compare**: each row's q · each column's k, divided by √Dh = √{Dh} = {np.sqrt(Dh):.0f}.")
    a.dataframe(frame(r["compare"], lambda x: f"{x:.2f}"))
    b.markdown("**2. Mask**: a token may not look at later tokens, so those scores become −∞."
               + (f" In this sliding layer it may not look {window:,} or more positions back either."
                  if window else ""))
    b.dataframe(frame(r["masked"], lambda x: "−∞" if np.isneginf(x) else f"{x:.2f}"))
    a, b = st.columns(2)
    a.markdown("**3. Softmax**: e^score for each cell, divided by the row's total; e^−∞ = 0.")
    a.dataframe(frame(r["weights"], lambda x: f"{x:.1%}"))
    last_pos = int(r["positions"][-1])
    if last_pos >= start:
        full = A[last_pos - start, [cols.index(int(c)) for c in r["positions"]]]
        reach = last_pos + 1 if window is None else min(last_pos + 1, window)
        a.caption(f"In the real model the row of ({last_pos}) spreads over {plural(reach, 'token')} up to it, not "
                  f"just these four; there these four get {', '.join(f'{w:.1%}' for w in full)}.")
    b.markdown(f"**4. Mix**: the new vector = weights × value vectors (KV head {r['kv_head']}). "
               f"First 5 of {Dh} numbers:")
    mix = pd.DataFrame(np.vstack([r["values"][:, :5], r["mixed"][-1:, :5]]),
                       index=[f"value of {h}" for h in heads] + [f"mix for ({last_pos})"],
                       columns=[f"d{j}" for j in range(5)])
    b.dataframe(mix.map(lambda x: f"{x:+.3f}"))
