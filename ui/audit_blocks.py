"""Cache-audit rows as HTML: each request as a bar of its blocks (tools, system, messages), cut where
the provider's cache stops, coloured hit / write / miss; the divergent token in both requests; and
the prefix tree as a plotly icicle. Every piece of log text goes through html_text or plotly_label."""
from __future__ import annotations

import plotly.graph_objects as go

from pipeline.prompt_cache.audit import RequestRecord, cause_words

from .escape import html_text, one_html_block, plotly_label
from .words import plural

HIT, WRITE, MISS = "hit", "write", "miss"
STATUS_STYLE = {  # background, border: the colours of ui/cache_blocks.py, plus a write colour
    HIT: ("#bbf7d0", "2px solid #16a34a"),
    WRITE: ("#dbeafe", "2px dashed #2563eb"),
    MISS: ("#fed7aa", "2px solid #ea580c"),
}
DIVERGENT_STYLE = "box-shadow:0 0 0 3px #dc2626;"
PROVIDER_LABEL = {"openai": "OpenAI", "anthropic": "Anthropic", "vllm": "vLLM"}


def legend() -> str:
    labels = {HIT: "hit: read from the cache", WRITE: "write: stored at an Anthropic breakpoint (billed 1.25× or 2×)",
              MISS: "miss: computed at the full price"}
    return "<div style='margin:4px 0 8px 0'>" + "".join(
        f"<span style='display:inline-block;background:{STATUS_STYLE[s][0]};border:{STATUS_STYLE[s][1]};"
        f"border-radius:5px;padding:1px 8px;margin-right:8px;font-size:0.85em;color:#111'>{html_text(t)}</span>"
        for s, t in labels.items()) + (f"<span style='display:inline-block;border-radius:5px;padding:1px 8px;"
                                       f"font-size:0.85em;{DIVERGENT_STYLE}color:#111'>block holding the first "
                                       f"divergent token</span></div>")


def status_ranges(rec: RequestRecord, provider: str) -> list[tuple[int, int, str]]:
    """[(start, end, status)] over the prompt's tokens for one provider.

    OpenAI, 1300 tokens, 1280 cached -> [(0, 1280, 'hit'), (1280, 1300, 'miss')]
    """
    n = rec.prompt_tokens
    if provider == "anthropic":
        a = rec.anthropic
        read, wrote = a.cache_read_input_tokens, a.cache_creation_input_tokens
        cuts = [(0, read, HIT), (read, read + wrote, WRITE), (read + wrote, n, MISS)]
    else:
        cached = rec.cached_tokens[provider]
        cuts = [(0, cached, HIT), (cached, n, MISS)]
    return [c for c in cuts if c[1] > c[0]]


def segments(rec: RequestRecord, provider: str) -> list[tuple[str, int, int, str]]:
    """Blocks cut at the status boundaries: [(block label, start, end, status)]."""
    out = []
    for label, start, end in rec.blocks:
        for a, b, status in status_ranges(rec, provider):
            lo, hi = max(start, a), min(end, b)
            if hi > lo:
                out.append((label, lo, hi, status))
    return out


def request_row_html(rec: RequestRecord, provider: str) -> str:
    """One bar per request: a box per block segment, its width the share of the prompt's tokens."""
    div = rec.first_divergent_index
    boxes = []
    for label, start, end, status in segments(rec, provider):
        bg, border = STATUS_STYLE[status]
        mark = DIVERGENT_STYLE if div is not None and start <= div < end else ""
        title = f"{label}: tokens {start:,}–{end - 1:,} ({end - start:,}), {status}"
        boxes.append(f"<div title='{html_text(title)}' style='flex:{end - start} 1 0;min-width:6px;height:30px;"
                     f"background:{bg};border:{border};{mark}border-radius:5px;overflow:hidden;color:#111;"
                     f"font-size:0.68em;padding:1px 3px;white-space:nowrap;text-overflow:ellipsis'>"
                     f"{html_text(label)}</div>")
    return one_html_block("<div style='display:flex;gap:3px;margin:2px 0 4px 0'>" + "".join(boxes) + "</div>")


def request_header_html(rec: RequestRecord, provider: str, cost: dict) -> str:
    """'#3 · 2,115 tokens · 1,792 cached (OpenAI) · at 0:42 · label' with the trap in red."""
    t = rec.time_s
    when = f" · at {int(t // 60)}:{int(t % 60):02d}" if t else ""
    trap = (f" <span style='color:#b91c1c;font-weight:600'>trap: {html_text(cause_words(rec.trap))}</span>"
            if rec.trap else f" <span style='color:#475569'>{html_text(cause_words(rec.cause))}</span>")
    cached = cost["cached_tokens"]
    return one_html_block(
        f"<div style='margin-top:10px'><b>#{rec.index}</b> · {plural(rec.prompt_tokens, 'token')} · "
        f"<b>{cached:,} cached</b> ({PROVIDER_LABEL[provider]}) · ${cost['with_cache']:.4f} "
        f"(${cost['without_cache']:.4f} uncached){when} ·{trap}<br><span style='color:#334155;font-size:0.9em'>"
        f"{html_text(rec.label)}</span></div>")


def _token_span(text: str, style: str) -> str:
    return (f"<span style='display:inline-block;{style}border-radius:4px;padding:0 4px;margin:1px;"
            f"font-family:monospace;font-size:0.85em;color:#111;white-space:pre'>{html_text(text)}</span>")


def divergence_html(rec: RequestRecord) -> str:
    """The shared tokens before the first difference, then each request's own tokens from there."""
    d = rec.divergence
    if not d:
        return ""
    plain = "background:#f1f5f9;border:1px solid #cbd5e1;"
    mine = "background:#fee2e2;border:2px solid #dc2626;font-weight:600;"
    theirs = "background:#e0e7ff;border:2px solid #4f46e5;font-weight:600;"
    shared = "".join(_token_span(t, plain) for t in d.before)
    here = _token_span(d.token, mine) + "".join(_token_span(t, plain) for t in d.after)
    there = (_token_span(d.other_token, theirs) + "".join(_token_span(t, plain) for t in d.other_after)
             if d.other_token is not None else "<i>(ends here)</i>")
    return one_html_block(
        f"<div style='margin:2px 0 2px 0;font-size:0.9em'>token {d.index:,}, in {html_text(d.where)}: "
        f"{shared}<br>&nbsp;&nbsp;this request: {here}<br>&nbsp;&nbsp;request {d.request}: {there}</div>")


def explanation_html(rec: RequestRecord) -> str:
    fix = f"<br><b>Fix:</b> {html_text(rec.fix)}" if rec.fix else ""
    return one_html_block(
        f"<div style='font-size:0.88em;color:#1e293b;margin:0 0 6px 0'>{html_text(rec.explanation)}"
        f"{fix}</div>")


def tree_figure(rows: list[dict], height: int = 520) -> go.Figure:
    """The prefix tree as an icicle: width = requests through a branch; label = its tokens and first words."""
    labels = [plotly_label(f"{r['tokens']:,} tok · {r['requests']} req") + "<br>" + plotly_label(r["text"][:28])
              if r["id"] != "root" else f"all {plural(r['requests'], 'request')}" for r in rows]
    hover = [plotly_label(f"{r['text'][:80]}") + f"<br>tokens {r['depth'] - r['tokens']:,}–{r['depth']:,}"
             f"<br>{plural(r['requests'], 'request')}" for r in rows]
    fig = go.Figure(go.Icicle(ids=[r["id"] for r in rows], parents=[r["parent"] for r in rows],
                              values=[r["requests"] for r in rows], labels=labels, branchvalues="total",
                              hovertext=hover, hoverinfo="text", tiling=dict(orientation="h"),
                              root_color="#334155"))
    fig.update_layout(height=height, margin=dict(t=10, b=10, l=10, r=10))
    return fig
