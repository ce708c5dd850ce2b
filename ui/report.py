"""One self-contained HTML file for a run: every stage with its charts and tables, plotly.js
embedded once, no server and no network needed to open it.

    html = trace_report(trace)             # str, ~1.6 MB (most of it plotly.js)
    Path("run.html").write_text(html, encoding="utf-8")

plotly.js is the official "cartesian" partial bundle (assets/plotly/, see its README.md): 1.5 MB instead
of plotly.py's full 4.8 MB, with every trace type the report draws (REPORT_TRACE_TYPES).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from pipeline.costs.named_time import tpot, ttft
from pipeline.stages.attention import attention_for_layer
from pipeline.stages.next_token import filter_stages

from .chips import highlighted_template, legend, token_chips
from .escape import axis_labels, html_text, json_text, plotly_label
from .words import plural

STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2rem auto;padding:0 1rem;color:#111}
h1{font-size:2rem}h2{margin-top:2.5rem;border-bottom:1px solid #e5e7eb;padding-bottom:.3rem}
pre{background:#f6f6f6;padding:.8rem;border-radius:8px;white-space:pre-wrap;word-break:break-word}
table{border-collapse:collapse;font-size:.9rem}td,th{border:1px solid #e5e7eb;padding:3px 8px;text-align:left}
.note{color:#555;font-size:.9rem}"""


PLOTLY_BUNDLE = Path(__file__).resolve().parent.parent / "assets" / "plotly" / "plotly-cartesian-4.1.1.min.js"
REPORT_TRACE_TYPES = ("heatmap", "bar", "scatter")  # what the figures below use; all in the cartesian bundle


@lru_cache(maxsize=1)
def plotly_js() -> str:
    return PLOTLY_BUNDLE.read_text(encoding="utf-8")


def figure_html(fig: go.Figure, height: int = 360) -> str:
    """The page's own template and margins that grow to fit the tick labels. Inside the app the default
    template is Streamlit's, which leaves automargin off: with a 10 px margin the labels were cut off."""
    fig.update_layout(template="plotly", height=height, font=dict(size=13),
                      margin=dict(l=10, r=10, t=40 if fig.layout.title.text else 30, b=10))
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})


def table_html(rows: list[dict]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{html_text(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html_text(str(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _pre(obj) -> str:
    return f"<pre>{html_text(json_text(obj, indent=1))}</pre>"  # lists of ids on one line, not one id a line


def trace_report(trace) -> str:
    """The whole run as one HTML page."""
    m, p = trace.dims, trace.prefill
    T, S = len(trace.tokens), len(trace.steps)
    labels = axis_labels([t.text for t in trace.tokens])
    parts = [f"<h1>{html_text(trace.request.messages[-1][1][:120])}</h1>",
             f"<p class='note'>Request {html_text(trace.request.id)} on {html_text(m.name)} ({html_text(m.device)}): "
             f"L={m.L} H={m.H} Hkv={m.Hkv} Dh={m.Dh} D={m.D} V={m.V:,}. Every number below comes from this run.</p>"]

    parts += ["<h2>1. The request</h2>", _pre(trace.request.openai)]
    parts += ["<h2>2. The chat template</h2>", legend(),
              highlighted_template(trace.segments, sorted({t.text for t in trace.tokens if t.special}))]
    parts += [f"<h2>3. Tokens ({plural(T, 'token')})</h2>", token_chips(trace.tokens)]
    parts += ["<h2>4. Batch tensors</h2>", table_html([{"tensor": k, "shape (B, T)": v["shape"], "dtype": v["dtype"],
                                                    "values": v["values"][0][:16]}
                                                   for k, v in trace.batch["single"].items()])]
    W = min(T, 48)
    E = p.embeddings[-W:].astype(np.float32)  # (W, D)
    lim = float(np.quantile(np.abs(E), 0.99)) or 1.0
    parts += [f"<h2>5. Embedding lookup</h2><p>Each id picks a row of D = {m.D} numbers (last {W} tokens).</p>",
              figure_html(go.Figure(go.Heatmap(z=E, y=labels[-W:], colorscale="RdBu", zmid=0, zmin=-lim, zmax=lim))
                   .update_yaxes(autorange="reversed"), 420)]
    norms = np.linalg.norm(p.hidden_states[:, -W:].astype(np.float32), axis=-1)  # (L+1, W)
    parts += ["<h2>6. Through every layer</h2><p>Length of each token's vector after each block (log10).</p>",
              figure_html(go.Figure(go.Heatmap(z=np.log10(np.maximum(norms, 1e-6)), x=labels[-W:],
                                               colorscale="Viridis"))
                          .update_yaxes(title="after block (0 = embedding)"), 420)]
    layer = m.L // 2
    A = attention_for_layer(p, layer, first_row=T - W, window=m.window(layer))  # (H, W, T)
    parts += [f"<h2>7. Attention</h2><p>Layer {layer}, every head, the last {W} query rows over the same keys.</p>"]
    for h in range(m.H):
        grid = A[h][:, T - W:]  # (W, W)
        grid = np.where(np.triu(np.ones_like(grid), 1) > 0, np.nan, grid)
        parts.append(figure_html(go.Figure(go.Heatmap(z=grid, x=labels[-W:], y=labels[-W:], colorscale="Blues", zmin=0))
                          .update_layout(title=f"head {h} (reads KV head {m.kv_head(h)})")
                          .update_yaxes(autorange="reversed"), 380))
    if S:
        first = trace.steps[0]
        parts += ["<h2>8. Logits: the first answer token</h2>",
                  figure_html(go.Figure(go.Bar(x=[c.prob for c in first.top][::-1],
                                        y=[plotly_label(f"{c.text} ({c.id})") for c in first.top][::-1],
                                        orientation="h")).update_xaxes(tickformat=".0%"), 340)]
        o = trace.request.options
        stages = filter_stages(trace.step_logits[0], o, trace.ids)
        parts += ["<h2>9. Sampling</h2>",
                  f"<p>temperature {o.temperature}, top-k {o.top_k}, top-p {o.top_p}, min-p {o.min_p}: "
                  + " → ".join(f"{html_text(s.name)} {plural(s.kept, 'candidate')}" for s in stages) + "</p>"]
    deltas = [e for e in trace.events if e["event"] == "text_delta"]
    parts += ["<h2>10. Detokenize and stream</h2>",
              f"<p>{plural(len(deltas), 'text_delta event')} for {plural(S, 'token')}; first token after "
              f"{html_text(ttft(trace).shown)} ({html_text(ttft(trace).label)})"
              + (f", then {html_text(tpot(trace).shown)} per token ({html_text(tpot(trace).label)})" if tpot(trace)
                 else "") + ".</p>",
              f"<pre>{html_text(trace.text or '(empty answer)')}</pre>"]
    parts += ["<h2>11. The decode loop and the KV cache</h2>",
              figure_html(go.Figure(go.Scatter(y=[s.kv_cache_bytes / 2**20 for s in trace.steps], mode="lines+markers"))
                   .update_layout(xaxis_title="decode step", yaxis_title="KV cache (MiB)"), 300),
              table_html([{"step": s.step, "token": s.token_text, "id": s.token_id, "cache tokens": s.kv_cache_tokens,
                       "ms": round(s.seconds * 1000, 1)} for s in trace.steps])]
    parts += ["<h2>12. The end and clean-up</h2>",
              f"<p>finish_reason <b>{html_text(trace.finish_reason)}</b>; released "
              f"{trace.cleanup.kv_bytes_released:,} bytes of KV cache for "
              f"{plural(trace.cleanup.kv_tokens_released, 'token')} "
              "(the last chosen token is never fed back).</p>", _pre(trace.events[-1])]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Token Pipeline Explorer report</title>"
            f"<style>{STYLE}</style><script>{plotly_js()}</script></head><body>"
            + "\n".join(parts) + "</body></html>")
