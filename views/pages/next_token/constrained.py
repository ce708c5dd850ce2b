"""Next token, "Constrained output": every token but a few allowed ones set to −∞ before softmax, the probabilities
with and without the constraint (pipeline/stages/next_token.py's mask_logits)."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
import streamlit as st

from pipeline.stages.next_token import mask_logits, softmax
from pipeline.stages.tokens import encode
from views.chrome.frame import fragment
from views.links.controls import linked
from views.links.params import text


@fragment
def constrained(tok, logits: np.ndarray, raw: np.ndarray, name: Callable[[int], str]) -> None:
    """logits: (V,) this step's scores; raw: (V,) their softmax; name: a token id -> its readable text."""
    V = len(logits)
    st.subheader("Constrained output: only some tokens allowed")
    st.caption("A service that must answer in a fixed format sets the score of every other token to −∞ "
               "before softmax. e^−∞ = 0, so those tokens can never be drawn, however likely they were.")
    words = linked(st.text_input, "nt_allowed", text(400),
                   "allowed answers (comma-separated; each word's first token is allowed)", "Yes, No")
    allowed = []
    for w in dict.fromkeys(x.strip() for x in words.split(",") if x.strip()):
        ids = encode(tok, w)
        if ids:
            allowed.append((w, int(ids[0])))
    if not allowed:
        st.info("Type at least one word.")
        return
    ids = sorted({i for _, i in allowed})
    p = softmax(mask_logits(logits, ids))  # (V,) zero outside `ids`
    table = pd.DataFrame({
        "token": [name(i) for i in ids], "id": ids, "logit": np.round(logits[ids], 3),
        "probability without the constraint": [f"{raw[i]:.3%}" for i in ids],
        "probability with only these allowed": [f"{p[i]:.2%}" for i in ids],
    })
    st.dataframe(table, hide_index=True, width="stretch")
    st.caption(f"The other {V - len(ids):,} tokens got −∞ and now have probability exactly "
               f"{p[np.setdiff1d(np.arange(V), ids)].max():.0%}.")
