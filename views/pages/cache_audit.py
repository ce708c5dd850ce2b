"""Cache audit: a real request log replayed under OpenAI's, Anthropic's and vLLM's prompt-cache rules."""
import pandas as pd
import streamlit as st

from pipeline.api.traffic import TRAFFIC, audit_log_text
from pipeline.core.errors import InputError
from pipeline.prompt_cache import audit as ca
from ui.audit_blocks import (
    PROVIDER_LABEL,
    divergence_html,
    explanation_html,
    legend,
    request_header_html,
    request_row_html,
    tree_figure,
)
from ui.escape import markdown_text
from ui.metric_delta import metric_delta
from ui.words import plural
from views.chrome.frame import end_page, page_header
from views.chrome.navigation import back_next
from views.links.controls import left_out, linked
from views.links.params import WIDE, boolean, choice, integer, number

page_header("Cache audit", "Paste or upload what your app sends: request by request, what OpenAI, Anthropic or a vLLM "
                           "server would read from its prompt cache, why the rest missed, and what it costs.")
RULES = ca.load_rules()
PAGE_SIZES = (10, 20, 50)


@st.cache_data(max_entries=16, show_spinner="Tokenizing the log and replaying it through the three caches...")
def audited(text: str, provider: str, breakpoints: str) -> ca.AuditReport:
    return ca.audit_log(text, provider=provider, breakpoints=breakpoints)


@st.cache_data(max_entries=8, show_spinner="Rewriting the log and auditing it again...")
def with_fixes(text: str, provider: str, breakpoints: str) -> dict:
    return ca.audit_fixes(text, provider=provider, breakpoints=breakpoints)


def fix_message(what: str, e: InputError) -> None:
    """The error as plain text: it may quote the log (a `ts`, a key), which must not become a link."""
    st.error(f"Please fix the {what} — {markdown_text(str(e))}")


def read_upload(upload) -> str:
    if upload.size > ca.MAX_LOG_BYTES:
        raise InputError("file", f"{upload.name} is {upload.size / 2**20:.1f} MB; the limit is "
                                 f"{ca.MAX_LOG_BYTES / 2**20:.0f} MB.")
    try:
        return upload.getvalue().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError("file", f"{upload.name} is not UTF-8 text (byte {e.start:,}).") from None


def price_table() -> pd.DataFrame:
    rows = [{"provider": p, **{k: v for k, v in RULES["providers"][p]["price"].items() if k != "source"}}
            for p in ca.PROVIDERS]
    return pd.DataFrame(rows).set_index("provider")


st.subheader("1. The log")
st.markdown("One request body per line (JSONL) or a JSON array, in the order sent: OpenAI Chat Completions, "
            "OpenAI Responses or Anthropic Messages. Timestamps drive expiry: a top-level `\"ts\"` in the body, "
            "or each line as `{\"ts\": ..., \"body\": {...}}` (seconds or ISO-8601).")
OWN_TRAFFIC = "This server's traffic"
SOURCES = ["A prepared example", OWN_TRAFFIC, "Paste", "Upload a file"]
source = linked(st.radio, "ca_source", choice(SOURCES), "Log", SOURCES, horizontal=True)
try:
    if source == "A prepared example":
        example = linked(st.selectbox, "ca_example", choice(ca.EXAMPLES), "Example", list(ca.EXAMPLES),
                         format_func=lambda k: ca.EXAMPLES[k][0])
        text = ca.example_text(example)
    elif source == OWN_TRAFFIC:  # the requests this server's API answered, as the Traffic page lists them
        records = TRAFFIC.records()
        text = audit_log_text(records)
        if not records:
            st.info("This server's API has answered no request yet: point a client at `/v1` (the Traffic page shows "
                    "how), then come back.")
            end_page()
        st.caption(f"The last {plural(len(records), 'request')} this server's API answered (those whose body was "
                   "too large to keep are left out), in the order they came; open the page again for newer ones.")
    elif source == "Paste":
        with st.form("ca_paste"):
            left_out(st.text_area, "ca_text",
                     "a pasted log can be megabytes: a link carries the prepared examples only",
                     "Request bodies (JSON or JSONL)", height=200)
            st.form_submit_button("Audit", type="primary", key="ca_go")
        text = st.session_state.get("ca_text", "")
    else:
        upload = left_out(st.file_uploader, "ca_file", "an uploaded file cannot travel in a link",
                          "JSON or JSONL log (at most 50 MB)", type=["json", "jsonl"])
        text = read_upload(upload) if upload is not None else ""
except InputError as e:
    fix_message("log", e)
    end_page()
if not text.strip():
    st.info("Paste or upload a log to audit it, or pick a prepared example.")
    end_page()

c1, c2 = st.columns(2)
provider = linked(c1.radio, "ca_provider", choice(ca.PROVIDERS), "Explain for", ca.PROVIDERS,
                  format_func=PROVIDER_LABEL.get, horizontal=True,
                  help="whose cache lifetime decides 'shared prefix' and 'expired'; all three are counted")
auto = linked(c2.toggle, "ca_auto_bp", boolean, "Anthropic: add breakpoints where none were sent", value=True,
              help="the end of tools/system, the block before the last, and the last block")
breakpoints = "auto" if auto else "as-sent"
try:
    report = audited(text, provider, breakpoints)
except InputError as e:
    fix_message("log", e)
    end_page()
requests = report.requests

with st.expander("Prices (editable): dollars per million tokens and multipliers of the input price"):
    edited = left_out(st.data_editor, "ca_prices", "the edited price table", price_table(), width="stretch")
    out_tokens = linked(st.number_input, "ca_out_tokens", integer(0, 100_000),
                        "Output tokens per request when the log does not say", 0, 100_000, 200)
with st.expander("Prefill speed (editable): the provider's tokens per second, for the time saved"):
    st.caption("Providers do not publish how fast they prefill. These stand-ins come from the figure Anthropic "
               "published; put your own (time to first token of a long prompt, without caching).")
    tps = {p: linked(st.number_input, f"ca_tps_{p}", number(1.0, 1e9), f"{PROVIDER_LABEL[p]} prefill speed (tokens/s)",
                     min_value=1.0, value=float(RULES["providers"][p]["prefill_tps"]["value"]), step=1000.0,
                     help=RULES["providers"][p]["prefill_tps"]["source"])
           for p in ca.PROVIDERS}
try:
    costs = ca.bill(report, edited.to_dict(orient="index"), tps, int(out_tokens))
except InputError as e:
    fix_message("prices", e)
    end_page()

st.subheader("2. The bill")
cols = st.columns(3)
for col, p in zip(cols, ca.PROVIDERS):
    t = costs["totals"][p]
    col.metric(f"{PROVIDER_LABEL[p]}: prompt tokens from cache", f"{t['hit_rate']:.0%}",
               help=f"{t['cached_tokens']:,} of {t['prompt_tokens']:,} prompt tokens")
    change = (t["with_cache"] - t["without_cache"]) / t["without_cache"] if t["without_cache"] else 0.0
    col.metric("Bill with caching", f"${t['with_cache']:.4f}",
               **metric_delta(change, "+.0%", f" vs ${t['without_cache']:.4f} uncached", lower_is_better=True))
    col.caption(f"Prefill time saved: {t['latency_saved_s']:.1f} s at {tps[p]:,.0f} tokens/s (a stand-in: "
                f"edit it under 'Prefill speed')")
for warning in report.warnings:
    st.warning(markdown_text(warning))

st.subheader("3. The three providers side by side")
tables = [pd.DataFrame([{  # two tables, each whole in the page's width: in one of 15 columns the last 8 were cut
    "#": r.index, "request": r.label[:60], "tokens": r.prompt_tokens, "shared": r.shared_prefix_tokens,
    "OpenAI cached": r.cached_tokens["openai"], "Anthropic read": r.anthropic.cache_read_input_tokens,
    "Anthropic write": r.anthropic.cache_creation_input_tokens, "vLLM cached": r.cached_tokens["vllm"],
} for r in requests]), pd.DataFrame([{
    "#": r.index, "diverges at": "—" if r.first_divergent_index is None else f"token {r.first_divergent_index:,}",
    "cause": "a trap" if r.trap else ca.cause_words(r.cause), "trap": ca.TRAPS[r.trap][0] if r.trap else "",
    **{f"{PROVIDER_LABEL[p]} $": costs["requests"][i][p]["with_cache"] for p in ca.PROVIDERS},
} for i, r in enumerate(requests)])]
for table in tables:
    st.dataframe(table, hide_index=True, width="stretch", height=min(400, 38 + 35 * len(table)),
                 column_config={"request": st.column_config.TextColumn(width=300)})
traps = sorted({r.trap for r in requests if r.trap})
for trap in traps:
    st.warning(f"**Trap: {ca.TRAPS[trap][0]}** in {plural(sum(r.trap == trap for r in requests), 'request')}. "
               f"Fix: {ca.TRAPS[trap][1]}")

st.subheader("4. Request by request")
st.markdown(legend(), unsafe_allow_html=True)
f1, f2, f3 = st.columns(3)
only_misses = linked(f1.toggle, "ca_only_misses", boolean, "Only requests with a trap or a miss")
shown = [i for i, r in enumerate(requests) if not only_misses or r.trap or r.cause in ("expired", "different")]
size = linked(f2.selectbox, "ca_page_size", choice(PAGE_SIZES), "Requests per page", PAGE_SIZES, index=1)
pages = max(1, -(-len(shown) // size))
page = linked(f3.number_input, "ca_page", integer(1, WIDE), f"Page (of {pages})", 1, pages, 1, within=(1, pages))
for i in shown[(page - 1) * size:page * size]:
    rec = requests[i]
    st.markdown(request_header_html(rec, provider, costs["requests"][i][provider]), unsafe_allow_html=True)
    st.markdown(request_row_html(rec, provider), unsafe_allow_html=True)
    st.markdown(divergence_html(rec) + explanation_html(rec), unsafe_allow_html=True)
st.caption(f"Showing {min(size, max(0, len(shown) - (page - 1) * size))} of {plural(len(shown), 'request')} "
           f"({len(requests)} in the log).")

st.subheader("5. The prefix tree")
st.markdown("Requests that start the same share a trunk; each branch point is where some of them diverge. Left to "
            "right is the prompt from its first token; a box's height is the number of requests through it, and it "
            "says how many tokens its stretch holds and how it starts.")
st.plotly_chart(tree_figure(report.tree), width="stretch", key="ca_tree")

st.subheader("6. Apply the fixes")
st.markdown("The log rewritten: JSON with sorted keys, tools sorted by name, a date/time/ID near the start moved to "
            "the end of the request, and earlier turns kept word for word where a summary had replaced them.")
if linked(st.toggle, "ca_fixes", boolean, "Show the log with the fixes applied"):
    result = with_fixes(text, provider, breakpoints)
    after = ca.bill(result["after"], edited.to_dict(orient="index"), tps, int(out_tokens))
    changed = {n: c for n, c in result["changes"].items() if c}
    st.markdown(f"{len(changed)} of {plural(len(requests), 'request')} changed.")
    st.dataframe(pd.DataFrame([{
        "provider": PROVIDER_LABEL[p],
        "hit rate before": f"{costs['totals'][p]['hit_rate']:.0%}",
        "hit rate after": f"{after['totals'][p]['hit_rate']:.0%}",
        "bill before $": round(costs["totals"][p]["with_cache"], 4),
        "bill after $": round(after["totals"][p]["with_cache"], 4),
        "prefill saved after (s)": round(after["totals"][p]["latency_saved_s"], 1)} for p in ca.PROVIDERS]),
        hide_index=True, width="stretch")
    st.dataframe(pd.DataFrame([{
        "#": b.index, "changes": ", ".join(result["changes"][b.index]), "tokens before": b.prompt_tokens,
        "tokens after": a.prompt_tokens, f"{PROVIDER_LABEL[provider]} cached before": b.cached_tokens[provider],
        f"{PROVIDER_LABEL[provider]} cached after": a.cached_tokens[provider], "trap before": b.trap or "",
        "trap after": a.trap or ""} for b, a in zip(requests, result["after"].requests)]),
        hide_index=True, width="stretch", height=min(400, 38 + 35 * len(requests)))
    st.download_button("Download the fixed log (JSONL)", result["fixed_log"], "fixed_log.jsonl",
                       "application/jsonl", key="ca_download", on_click="ignore")

with st.expander("The rules, where each comes from, and what is an estimate"):
    for p in ca.PROVIDERS:
        st.markdown(f"**{PROVIDER_LABEL[p]}**")
        for rule in report.rules[p]["rules"]:
            st.markdown(f"- {rule['rule']} *({rule['source']})*")
    for note in report.notes:
        st.caption(note)
back_next()
