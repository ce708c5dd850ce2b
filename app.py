"""Token Pipeline Explorer: follow one chat request through a real small language model."""
from pathlib import Path

import streamlit as st

from pages.common import DEFAULTS, get_model, init_state

st.set_page_config(page_title="Token Pipeline Explorer", page_icon=":material/route:", layout="wide")

PAGES = [  # (file, title, icon) in the order a request travels
    ("journey.py", "Journey", ":material/route:"),
    ("request_template.py", "Request & template", ":material/mail:"),
    ("tokens.py", "Tokens", ":material/abc:"),
    ("tensors_batch.py", "Tensors & batch", ":material/grid_on:"),
    ("embeddings.py", "Embeddings", ":material/scatter_plot:"),
    ("position_rope.py", "Position (RoPE)", ":material/rotate_right:"),
    ("layers.py", "Layers", ":material/layers:"),
    ("attention.py", "Attention", ":material/visibility:"),
    ("next_token.py", "Next token", ":material/casino:"),
    ("generation.py", "Generation", ":material/fast_forward:"),
    ("kv_cache.py", "KV cache", ":material/memory:"),
    ("prefix_cache.py", "Prompt caching", ":material/recycling:"),
]
HERE = Path(__file__).parent


def sidebar() -> None:
    init_state()
    with st.sidebar:
        st.header("Your request")
        if st.button("Reset to the default request", use_container_width=True):
            for key, value in DEFAULTS.items():
                st.session_state[f"req_{key}"] = value
            st.rerun()
        with st.form("request_form"):
            st.text_area("Question (the new user message)", key="req_question", height=80)
            st.text_area("System prompt (empty: the template adds SmolLM2's default)", key="req_system", height=68)
            st.text_area("Earlier turns, one per line (`user: ...` / `assistant: ...`)", key="req_history",
                         height=68)
            st.markdown("**Generation options**")
            st.slider("max new tokens", 1, 256, key="req_max_new_tokens")
            st.slider("temperature (0 = greedy)", 0.0, 2.0, step=0.05, key="req_temperature")
            c1, c2 = st.columns(2)
            c1.number_input("top-k (0 = off)", 0, 49152, step=1, key="req_top_k")
            c2.number_input("seed", 0, 2**31 - 1, step=1, key="req_seed")
            c1.slider("top-p", 0.01, 1.0, step=0.01, key="req_top_p")
            c2.slider("min-p", 0.0, 1.0, step=0.01, key="req_min_p")
            st.text_input("stop strings (separate with |)", key="req_stop")
            st.form_submit_button("Run the model", type="primary", use_container_width=True)
        lm = get_model()
        st.caption(f"Model: {lm.name} on {lm.device}. Forward passes so far: {lm.calls}.")


get_model()
sidebar()
pages = [st.Page(str(HERE / "pages" / f), title=t, icon=i, default=(n == 0))
         for n, (f, t, i) in enumerate(PAGES) if (HERE / "pages" / f).exists()]
st.navigation(pages).run()
