"""Prompt caching: real K/V blocks kept after one request and reused by the next."""
import plotly.graph_objects as go
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.costs.verdicts import summary
from pipeline.prompt_cache.playback import compare_texts, work_flops
from pipeline.prompt_cache.scenarios import INSTRUCTIONS, QUESTION_1, QUESTION_2, TRAPS, scenarios
from ui.cache_blocks import block_legend, block_row_html, divergence_html
from ui.escape import markdown_text, plotly_label
from ui.words import plural
from views.chrome.frame import page_header
from views.chrome.navigation import back_next
from views.links.controls import declare, linked
from views.links.params import choice, text
from views.request.runs import run_for_page
from views.server.measured import measured_when
from views.server.reuse_saving import reuse_section, server_cache_caption
from views.server.scenarios import scenario_rows, scenario_rows_timed_again
from views.server.state import (
    APP_MAX_PROMPT_TOKENS,
    get_model,
    picked_model_key,
    picked_weights,
    server_reuse,
)
from views.server.verdict_log import history_lines, kept
from views.server.waiting import result_through_queue

page_header("Prompt caching", "A chat model remembers nothing between requests, so an app resends the whole "
                              "conversation every time. A prompt cache keeps the keys and values computed for "
                              "an earlier prompt and skips recomputing any start it has already seen.")
lm = get_model()
SCENARIOS = scenarios()
BLOCK_SIZES = [4, 8, 16, 32]  # tokens per cached block, offered


def compared(text_a: str, text_b: str, block_size: int) -> list[dict]:
    """Requests A then B on the picked model, through the queue, kept for everyone (result_through_queue)."""
    return result_through_queue(("compare", text_a, text_b, block_size), lambda: compare_texts(
        get_model(), text_a, text_b, block_size, max_prompt_tokens=APP_MAX_PROMPT_TOKENS), cost=4000)


def history_key(row: dict) -> tuple:
    """Where a scenario request's measurements are kept (views.server.verdict_log): the same token ids on the same
    model, in the same weight format and block size, reusing as much."""
    return ("prompt cache", picked_model_key(), picked_weights(), row["stats"]["block_size"], tuple(row["ids"]),
            row["stats"]["tokens_reused"])


def show_request(row: dict, shared: bool = True) -> None:
    """One request's row. shared: a scenario's, measured for everyone and kept with its earlier measurements; else a
    visitor's own request (section 3), shown with its own measurement only."""
    s, timing = row["stats"], row["timing"]
    computed, cold = work_flops(lm.dims, s)  # from the stats: a row kept from an older count is counted anew
    work = (f"{computed / 1e9:,.1f} GFLOP instead of {cold / 1e9:,.1f} cold"
            if s["tokens_reused"] else f"{cold / 1e9:,.1f} GFLOP, as cold")
    st.markdown(f"**{row['label']}**" + (f" — {row['note']}" if row["note"] else "") +
                f"  \n{plural(s['n_tokens'], 'token')}: {s['blocks_hit']} blocks hit, {s['blocks_missed']} missed, "
                + (f"{s['blocks_recomputed']} cached but run again, " if s.get("blocks_recomputed") else "") +
                f"{s['blocks_not_cacheable']} not cacheable · **{s['tokens_computed']} computed, "
                f"{s['tokens_reused']} reused** ({row['kv_bytes_read'] / 2**20:,.1f} MiB of K/V read back) · {work}")
    if timing is not None:
        at, host = row.get("measured_at"), row.get("measured_on")
        when = f" (measured {measured_when(at, host)})" if at else ""
        st.caption(f"Time to first token, with the cache {timing.a_median * 1e3:,.0f} ms vs cold "
                   f"{timing.b_median * 1e3:,.0f} ms{when}: {timing.verdict('with the cache', 'cold')}.")
        history = kept(history_key(row), timing, row.get("measured_at") or 0.0) if shared else []
        if len(history) > 1:  # timed again: the earlier measurements stay beside the new one
            st.caption(f"All {len(history)} measurements of this request here: "
                       f"{markdown_text(summary(history, 'with the cache', 'cold'))}.  \n"
                       + history_lines(history, "with the cache", "cold"))
    elif not s["tokens_reused"]:
        st.caption(f"Time to first token {s['ttft_s'] * 1e3:,.0f} ms. Nothing was reused, so this request does "
                   "the same work as a cold one: there is no speed difference to measure.")
    st.markdown(block_row_html(row), unsafe_allow_html=True)
    st.markdown(divergence_html(row), unsafe_allow_html=True)
    st.caption(markdown_text(row["reason"]))


def ttft_chart(rows: list[dict]) -> go.Figure:
    """Medians of the interleaved runs, with whiskers over their full range; (i) = the i-th request shown."""
    labels = [plotly_label(f"({i + 1}) {r['label']}") for i, r in enumerate(rows) if r["timing"] is not None]
    rows = [r for r in rows if r["timing"] is not None]  # only requests whose work differs are compared
    bars = []
    for name, median, span, colour in (("with the cache", "a_median", "a_range", "#16a34a"),
                                       ("cold (nothing reused)", "b_median", "b_range", "#ea580c")):
        y = [getattr(r["timing"], median) * 1e3 for r in rows]
        lo = [y_ - getattr(r["timing"], span)[0] * 1e3 for y_, r in zip(y, rows)]
        hi = [getattr(r["timing"], span)[1] * 1e3 - y_ for y_, r in zip(y, rows)]
        bars.append(go.Bar(name=name, x=labels, y=y, marker_color=colour,
                           error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo)))
    fig = go.Figure(bars)
    fig.update_layout(barmode="group", height=300, margin=dict(t=30, b=10, l=10, r=10),
                      yaxis_title="time to first token (ms)",
                      title="Measured time to first token: medians, whiskers = range of the interleaved runs")
    return fig


st.markdown("""
- The prompt is cut into **blocks** of a fixed number of tokens. Each block's key is a hash of its tokens
  *and of every token before it*, so a block can only match if the whole text before it matches too.
- A new request reuses the longest run of cached blocks from its start, and the model runs only on the rest.
- **Partial blocks are not cached**: the last tokens that do not fill a block are computed every time.
- Blocks unused for a while expire, and the least recently used go first when memory is full.
""")
block_size = linked(st.select_slider, "pc_block_size", choice(BLOCK_SIZES), "Block size (tokens)", BLOCK_SIZES,
                    value=16, older=("block",))

st.subheader("1. Pick a scenario")
declare("pc_scenario", choice(list(SCENARIOS)), older=("scenario",))  # set by the buttons below
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
rows = scenario_rows(scenario.key, block_size)
timed = [r["measured_at"] for r in rows if r.get("measured_at")]
if timed and st.button("⟳ Time these requests again now", key="pc_time_again",
                       help="The times below were measured once, when the scenario was first played here (they are "
                            "kept with the stored runs), and everyone here sees them. Timing again shows the new "
                            "times, with the earlier ones listed beside them (at most once a minute)."):
    rows = scenario_rows_timed_again(scenario.key, block_size)
st.subheader(f"2. {scenario.title}")
st.markdown({"trap": "**Trap.** ", "fixed": "**Fixed.** "}.get(scenario.kind, "") + scenario.lesson)
st.markdown(block_legend(), unsafe_allow_html=True)
for row in rows:
    show_request(row)
if any(r["timing"] is not None for r in rows):
    st.plotly_chart(ttft_chart(rows), width="stretch", key="pc_ttft")
last = rows[-1]
c1, c2, c3 = st.columns(3)
c1.metric("Hit rate over these requests", f"{last['session_hit_rate']:.0%}", help="prompt tokens read from cache")
c2.metric("Bytes the cache holds", f"{last['bytes_held'] / 2**20:.1f} MiB")
c3.metric("KV formula for the same tokens", f"{last['formula_bytes'] / 2**20:.1f} MiB",
          help="2 (K and V) × layers × KV heads × head width × tokens × 4 bytes")
st.caption("The token counts and the work (GFLOP of the layers' matrix multiplies, attention and the LM head for "
           "the last token, counted as on Prefill & decode) do not depend on how busy this "
           "server is; the times do. Each request is timed again as it met the cache and cold, alternately, three "
           "times each: the bars are medians, the whiskers the range, and a ratio is claimed only when the ranges "
           "do not overlap. A result where the cache came out slower contradicts the work done: it is measured "
           "again, and if it still does, it is shown as noise. Where nothing is reused both runs would do the same "
           "work, so no comparison is made. The first token's scores are the "
           "same either way: reusing stored keys and values changes the time, not the answer.")

st.subheader("3. Compare two requests of your own")
st.markdown("One message per line starting with `system:`, `user:` or `assistant:` (other lines continue the "
            "message). Request A runs first and fills the cache; then request B shows what it can reuse. "
            "Try changing one word near the top of B, then near the bottom.")
default = f"system: {INSTRUCTIONS}\nuser: {QUESTION_1}"
with st.form("pc_compare"):
    a, b = st.columns(2)
    text_a = linked(a.text_area, "pc_text_a", text(), "Request A", default, height=220)
    text_b = linked(b.text_area, "pc_text_b", text(), "Request B", default.replace(QUESTION_1, QUESTION_2), height=220)
    st.form_submit_button("Compare", type="primary", key="pc_compare_go")
try:
    for row in compared(text_a, text_b, block_size):
        show_request(row, shared=False)
except InputError as e:
    st.error(f"Please fix the requests — {markdown_text(e)}")

st.subheader("4. The server's own prefix cache: your request's run")
st.markdown("Every request this server runs (yours, the room's, the API's) goes through one prefix cache per model, "
            "as above with blocks of 16 tokens: its first cached blocks are not run again.")
reuse_section(run_for_page(original=True), "pc")
st.caption(server_cache_caption(server_reuse(), lm))
back_next()
