"""Attention, "Shared keys and values": which query heads read each key/value head (grouped-query or multi-query
attention), and where the heads of one group look."""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from pipeline.model.dims import ModelDims
from pipeline.stages import attention as at
from ui.escape import code_span
from ui.words import plural


def shared_kv(m: ModelDims, names: list[str], head: int, rows: np.ndarray, cols: list) -> None:
    """Which query heads read each key/value head, and where the picked head's group looks for the last token;
    rows: (H, W, C) the layer's drawn grids, cols: their key columns (None: the summed middle)."""
    H, Hkv = m.H, m.Hkv
    sharing = at.kv_sharing(H, Hkv)
    st.subheader(f"Shared keys and values ({sharing} attention)")
    group = m.group
    if Hkv == H:
        st.markdown(f"This model has H = {H} query heads and as many key/value heads: nothing is shared.")
    else:
        who = (f"all {H} query heads share that one set of keys and values" if Hkv == 1 else
               f"every {group} query heads share one set of keys and values")
        st.markdown(f"This model has H = {H} query heads but only Hkv = {plural(Hkv, 'key/value head')}: {who} "
                    f"({sharing} attention). That makes the KV cache {group}× smaller; each query head still asks "
                    "its own question, so heads that share keys can look at different tokens.")
    st.dataframe(pd.DataFrame({"KV head": range(Hkv),
                               "query heads reading it": [", ".join(str(h) for h in range(H) if m.kv_head(h) == g)
                                                          for g in range(Hkv)]}), hide_index=True)
    same = [h for h in range(H) if m.kv_head(h) == m.kv_head(head)]
    favourite = lambda h: cols[int(np.argmax(rows[h, -1]))]  # noqa: E731  key column -> position (None = summed)
    st.caption(f"Head {head} shares KV head {m.kv_head(head)} with heads "
               f"{', '.join(str(h) for h in same if h != head)}. "
               f"Where each of them puts most weight for the last token: "
               + ", ".join(f"head {h} → " + (code_span(names[favourite(h)]) if favourite(h) is not None
                                               else "the summed middle tokens") for h in same))
