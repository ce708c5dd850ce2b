"""Token Pipeline Explorer: follow one chat request through a real small language model.

Start with `./run.sh` (or `streamlit run app.py`); settings live in .streamlit/config.toml.
"""
from pathlib import Path

import streamlit as st

from pipeline.model.loader import counting_passes
from views.common import DEFAULTS, TEXT_LIMIT, get_model, init_state, session_passes

HERE = Path(__file__).parent
st.set_page_config(page_title="Token Pipeline Explorer", page_icon=str(HERE / "assets" / "favicon.png"),
                   layout="wide")

PAGES = [  # (file, title, icon, url) in the order a request travels; emoji icons are drawn locally
    ("journey.py", "Journey", "🧭", "journey"),
    ("request_template.py", "Request & template", "📨", "request"),
    ("tokens.py", "Tokens", "🔤", "tokens"),
    ("tensors_batch.py", "Tensors & batch", "🧮", "tensors"),
    ("embeddings.py", "Embeddings", "📍", "embeddings"),
    ("position_rope.py", "Position (RoPE)", "🌀", "position"),
    ("layers.py", "Layers", "🥞", "layers"),
    ("attention.py", "Attention", "👀", "attention"),
    ("next_token.py", "Next token", "🎲", "next-token"),
    ("generation.py", "Generation", "⏩", "generation"),
    ("kv_cache.py", "KV cache", "🗄️", "kv-cache"),
    ("prefix_cache.py", "Prompt caching", "♻️", "prompt-caching"),
]


def sidebar():
    """The request form every page follows. Returns a placeholder for the pass count (filled last)."""
    init_state()
    with st.sidebar:
        st.header("Your request")
        if st.button("Reset to the default request", use_container_width=True):
            for key, value in DEFAULTS.items():
                st.session_state[f"req_{key}"] = value
            st.rerun()
        with st.form("request_form"):
            st.text_area("Question (the new user message)", key="req_question", height=80, max_chars=TEXT_LIMIT)
            st.text_area("System prompt (empty: the template adds SmolLM2's default)", key="req_system", height=68,
                         max_chars=TEXT_LIMIT)
            st.text_area("Earlier turns, one per line (`user: ...` / `assistant: ...`)", key="req_history",
                         height=68, max_chars=TEXT_LIMIT)
            st.markdown("**Generation options**")
            st.slider("max new tokens", 1, 256, key="req_max_new_tokens")
            st.slider("temperature (0 = greedy)", 0.0, 2.0, step=0.05, key="req_temperature")
            c1, c2 = st.columns(2)
            c1.number_input("top-k (0 = off)", 0, 49152, step=1, key="req_top_k")
            c2.number_input("seed", 0, 2**31 - 1, step=1, key="req_seed")
            c1.slider("top-p", 0.01, 1.0, step=0.01, key="req_top_p")
            c2.slider("min-p", 0.0, 1.0, step=0.01, key="req_min_p")
            st.text_input("stop strings (separate with |)", key="req_stop", max_chars=400)
            st.form_submit_button("Run the model", type="primary", use_container_width=True)
        return st.empty()


lm = get_model()
passes_box = sidebar()
pages = [st.Page(str(HERE / "views" / f), title=t, icon=i, url_path=u, default=(n == 0))
         for n, (f, t, i, u) in enumerate(PAGES)]
with counting_passes(session_passes()) as passes:
    try:
        st.navigation(pages).run()
    finally:  # also after st.stop(): the count is this session's own, filled in once the page has run
        passes_box.caption(f"Model: {lm.name} on {lm.device}. Forward passes run for your session: {passes.n}.")
