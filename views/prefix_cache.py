"""Prompt caching: real K/V blocks kept after one request and reused by the next."""
from views.common import APP_MAX_PROMPT_TOKENS, get_model, page_header

import plotly.graph_objects as go
import streamlit as st

from pipeline.prompt_cache.playback import compare_texts, play
from pipeline.prompt_cache.scenarios import INSTRUCTIONS, QUESTION_1, QUESTION_2, TRAPS, scenarios
from ui.cache_blocks import block_legend, block_row_html, divergence_html
from pipeline.errors import InputError
from ui.escape import plotly_label

page_header("Prompt caching", "A chat model remembers nothing between requests, so an app resends the whole "
                              "conversation every time. A prompt cache keeps the keys and values computed for "
                              "an earlier prompt and skips recomputing any start it has already seen.")
lm = get_model()
SCENARIOS = scenarios()


@st.cache_data(max_entries=24, show_spinner="Playing the requests through the cache, then each one cold...")
def played(key: str, block_size: int) -> list[dict]:
    return play(get_model(), SCENARIOS[key], block_size)


@st.cache_data(max_entries=16, show_spinner="Running both requests...")
def compared(text_a: str, text_b: str, block_size: int) -> list[dict]:
    return compare_texts(get_model(), text_a, text_b, block_size, max_prompt_tokens=APP_MAX_PROMPT_TOKENS)


def show_request(row: dict) -> None:
    s = row["stats"]
    cold = row["ttft_cold_s"]
    speed = f" ({cold / s['ttft_s']:.1f}× faster)" if s["tokens_reused"] else ""
    st.markdown(f"**{row['label']}**" + (f" — {row['note']}" if row["note"] else "") +
                f"  \n{s['n_tokens']} tokens: {s['blocks_hit']} blocks hit, {s['blocks_missed']} missed, "
                + (f"{s['blocks_recomputed']} cached but run again, " if s.get("blocks_recomputed") else "") +
                f"{s['blocks_not_cacheable']} not cacheable · **{s['tokens_reused']} tokens not recomputed** · "
                f"TTFT {s['ttft_s'] * 1e3:.0f} ms, the same request cold {cold * 1e3:.0f} ms{speed}")
    st.markdown(block_row_html(row), unsafe_allow_html=True)
    st.markdown(divergence_html(row), unsafe_allow_html=True)
    st.caption(row["reason"])


def ttft_chart(rows: list[dict]) -> go.Figure:
    labels = [plotly_label(f"({i + 1}) {r['label']}") for i, r in enumerate(rows)]
    fig = go.Figure([go.Bar(name="with the cache", x=labels, y=[r["stats"]["ttft_s"] * 1e3 for r in rows],
                            marker_color="#16a34a"),
                     go.Bar(name="cold (nothing reused)", x=labels, y=[r["ttft_cold_s"] * 1e3 for r in rows],
                            marker_color="#ea580c")])
    fig.update_layout(barmode="group", height=280, margin=dict(t=30, b=10, l=10, r=10),
                      yaxis_title="time to first token (ms)", title="Measured time to first token")
    return fig


st.markdown("""
- The prompt is cut into **blocks** of a fixed number of tokens. Each block's key is a hash of its tokens
  *and of every token before it*, so a block can only match if the whole text before it matches too.
- A new request reuses the longest run of cached blocks from its start, and the model runs only on the rest.
- **Partial blocks are not cached**: the last tokens that do not fill a block are computed every time.
- Blocks unused for a while expire, and the least recently used go first when memory is full.
""")
block_size = st.select_slider("Block size (tokens)", [4, 8, 16, 32], value=16, key="pc_block_size")

st.subheader("1. Pick a scenario")
if "pc_scenario" not in st.session_state:
    st.session_state.pc_scenario = "conversation"
if st.button("A conversation, turn by turn", key="pc_btn_conversation"):
    st.session_state.pc_scenario = "conversation"
for col, (trap, title) in zip(st.columns(len(TRAPS)), TRAPS):
    col.markdown(f"**{title}**")
    if col.button("✗ the trap", key=f"pc_btn_{trap}_trap", width="stretch"):
        st.session_state.pc_scenario = f"{trap}_trap"
    if col.button("✓ the fix", key=f"pc_btn_{trap}_fixed", width="stretch"):
        st.session_state.pc_scenario = f"{trap}_fixed"

scenario = SCENARIOS[st.session_state.pc_scenario]
rows = played(scenario.key, block_size)
st.subheader(f"2. {scenario.title}")
st.markdown(f"{'**Trap.** ' if scenario.kind == 'trap' else '**Fixed.** ' if scenario.kind == 'fixed' else ''}{scenario.lesson}")
st.markdown(block_legend(), unsafe_allow_html=True)
for row in rows:
    show_request(row)
st.plotly_chart(ttft_chart(rows), width="stretch", key="pc_ttft")
last = rows[-1]
c1, c2, c3 = st.columns(3)
c1.metric("Hit rate over these requests", f"{last['session_hit_rate']:.0%}", help="prompt tokens read from cache")
c2.metric("Bytes the cache holds", f"{last['bytes_held'] / 2**20:.1f} MiB")
c3.metric("KV formula for the same tokens", f"{last['formula_bytes'] / 2**20:.1f} MiB",
          help="2 (K and V) × layers × KV heads × head width × tokens × 4 bytes")
st.caption("Times are measured on this machine for each request, once through the cache and once cold. Where nothing "
           "is reused both runs do the same work, so any gap between them is noise. The first token's scores are the "
           "same either way: reusing stored keys and values changes the time, not the answer.")

st.subheader("3. Compare two requests of your own")
st.markdown("One message per line starting with `system:`, `user:` or `assistant:` (other lines continue the "
            "message). Request A runs first and fills the cache; then request B shows what it can reuse. "
            "Try changing one word near the top of B, then near the bottom.")
default = f"system: {INSTRUCTIONS}\nuser: {QUESTION_1}"
with st.form("pc_compare"):
    a, b = st.columns(2)
    text_a = a.text_area("Request A", default, height=220, key="pc_text_a")
    text_b = b.text_area("Request B", default.replace(QUESTION_1, QUESTION_2), height=220, key="pc_text_b")
    st.form_submit_button("Compare", type="primary", key="pc_compare_go")
try:
    for row in compared(text_a, text_b, block_size):
        show_request(row)
except InputError as e:
    st.error(f"Please fix the requests — {e}")
