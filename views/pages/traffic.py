"""Traffic: the requests this server's API answered, live: their cache hits block by block, their times, and what
OpenAI's, Anthropic's and vLLM's rules would have reported and billed for each (the cache audit's rules)."""
from urllib.parse import urlsplit

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.api.traffic import TRAFFIC, TrafficRecord, audit_log_text, by_client, hit_rates
from pipeline.core.errors import InputError
from pipeline.model.registry import resolve
from pipeline.costs.named_time import shown
from pipeline.prompt_cache import audit as ca
from ui.escape import markdown_text
from ui.traffic_rows import legend, request_row, traffic_table
from views.chrome.frame import page_header
from views.chrome.navigation import back_next
from views.request.session import model_label
from views.server.state import picked_model_key

REFRESH_S = 2  # how often the list is read again, without a reload
ROWS_SHOWN = 50  # the newest requests drawn; the chart and the summary count every record kept

page_header("Traffic", "The requests your own client sends to this server's API (OpenAI's and Anthropic's SDKs, "
                       "curl), as they arrive: which prompt blocks came from the prefix cache, how long the first "
                       "token took, and what each provider's caching rules would have billed for it.")


def server_base() -> str:
    """This server's address, as the browser reached it."""
    parts = urlsplit(st.context.url or "")
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else "http://localhost:8501"


def how_to_send() -> None:
    base = server_base()
    model = model_label(resolve(picked_model_key()))  # the API's name for the model this session has picked
    st.info("No request yet. Send one to this server's API (started by `./run.sh`; `streamlit run app.py` serves "
            "the pages alone, without the API) and it appears here within seconds, no reload needed:")
    st.code(f"from openai import OpenAI\n\nclient = OpenAI(base_url=\"{base}/v1\", api_key=\"unused\")\n"
            f"answer = client.chat.completions.create(model=\"{model}\", messages=[\n"
            "    {\"role\": \"system\", \"content\": \"You are a support agent.\"},\n"
            "    {\"role\": \"user\", \"content\": \"Where is my parcel?\"}])\n"
            "print(answer.choices[0].message.content, answer.usage.prompt_tokens_details.cached_tokens)",
            language="python")
    st.code(f"curl {base}/v1/chat/completions -H 'content-type: application/json' -d '{{\"model\": "
            f"\"{model}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'",
            language="bash")
    st.caption("`python bench/agent_traffic.py --base-url " + base + "` sends a 20-turn support chat twice: once "
               "with a stable system prompt, once with a timestamp at its top (the classic trap).")


@st.cache_resource(max_entries=4, show_spinner=False)
def audited(version: int, _records: list[TrafficRecord]) -> dict[int, tuple]:
    """{request number: (its replay, its bill)}: the traffic log at this version replayed under the three
    providers' rules and priced (the Cache audit page's functions), once per version of the log, not per refresh."""
    log_text = audit_log_text(_records)
    if not log_text:
        return {}
    report = ca.audit_log(log_text)
    kept = [r.number for r in _records if r.body is not None]
    return dict(zip(kept, zip(report.requests, ca.bill(report)["requests"])))


def hit_rate_chart(records: list[TrafficRecord]) -> go.Figure:
    rows = hit_rates(records)
    numbers = [n for n, _, _ in rows]
    fig = go.Figure([
        go.Scatter(x=numbers, y=[100 * h for _, h, _ in rows], mode="markers", name="this request",
                   marker={"color": "#16a34a", "size": 8}),
        go.Scatter(x=numbers, y=[100 * h for _, _, h in rows], mode="lines", name="running (all so far)",
                   line={"color": "#1e3a8a"})])
    fig.update_layout(height=260, margin={"l": 40, "r": 10, "t": 10, "b": 40}, legend={"orientation": "h"},
                      xaxis_title="request #", xaxis_tickformat=",d", yaxis_title="prompt tokens cached (%)",
                      yaxis_range=[-2, 102])
    if len(rows) <= 20:
        fig.update_xaxes(dtick=1)  # whole requests only (plotly's own ticks fall between them: 1, 1.5, 2)
    return fig


@st.fragment(run_every=REFRESH_S)
def live() -> None:
    version, records = TRAFFIC.versioned()
    if not records:
        how_to_send()
        return
    c1, c2, c3 = st.columns(3)
    prompt, cached = sum(r.prompt_tokens for r in records), sum(r.cached_tokens for r in records)
    c1.metric("Requests", f"{TRAFFIC.count:,}", help=f"the latest {len(records):,} are kept")
    c2.metric("Prompt tokens from the prefix cache", f"{cached / prompt:.0%}" if prompt else "—",
              help=f"{cached:,} of {prompt:,}")
    c3.metric("New tokens", f"{sum(r.new_tokens for r in records):,}")
    st.plotly_chart(hit_rate_chart(records), width="stretch", key="tr_hit_rate")
    st.dataframe(pd.DataFrame([{
        "client": row["client"] or "—", "requests": row["requests"], "hit rate": f"{row['hit_rate']:.0%}",
        "TTFT p50": shown(row["ttft_p50_s"]) if row["ttft_p50_s"] is not None else "—",
        "TTFT p95": shown(row["ttft_p95_s"]) if row["ttft_p95_s"] is not None else "—"}
        for row in by_client(records)]), hide_index=True, width="stretch")

    priced: dict[int, tuple] = {}
    try:
        priced = audited(version, records)
    except InputError as e:
        st.warning(f"The cache audit could not read this traffic: {markdown_text(str(e))}")
    st.markdown(legend() + " · newest first; the providers' columns replay the requests kept under OpenAI's, "
                "Anthropic's and vLLM's caching rules (the Cache audit page's rules and default prices, counted "
                "with OpenAI's tokenizer).", unsafe_allow_html=True)
    shown_records = records[::-1][:ROWS_SHOWN]
    st.markdown(traffic_table([request_row(r, *priced.get(r.number, (None, None))) for r in shown_records]),
                unsafe_allow_html=True)
    if len(records) > ROWS_SHOWN:
        st.caption(f"The newest {ROWS_SHOWN} of {len(records):,} kept requests.")
    st.download_button("Download this traffic as a cache-audit log (JSONL)", lambda: audit_log_text(records),
                       "traffic_log.jsonl",
                       "application/jsonl", key="tr_download", on_click="ignore",
                       help="for another server's Cache audit; this server's reads it as its log source \"This "
                            "server's traffic\": the traps, the prefix tree, the fixes")


live()
back_next()
