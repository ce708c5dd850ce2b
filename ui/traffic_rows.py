"""The Traffic page's HTML: one table row per API request, its prompt's blocks as chips (hit or miss), what each
provider's rules would have reported and billed. Every text a client sent or a model wrote is escaped."""
from __future__ import annotations

from datetime import datetime, timezone
from urllib.parse import urlsplit

from pipeline.api.traffic import TrafficRecord
from pipeline.costs.named_time import shown
from pipeline.prompt_cache.outcomes import HIT, MISS

from .cache_blocks import STATUS_STYLE
from .escape import html_text

MAX_CHIPS = 64  # blocks drawn before the rest are counted: a 4,096-token prompt has 256 blocks of 16
PROVIDERS = (("openai", "OpenAI"), ("anthropic", "Anthropic"), ("vllm", "vLLM"))
CELL = "padding:4px 6px;border-bottom:1px solid #e2e8f0;vertical-align:top"
HEAD = ("#", "time", "client", "model", "prompt", "cached", "new", "TTFT", "TPOT", "answer", "prefix blocks",
        "the providers' rules")


def _colours(hit: bool) -> str:
    """A hit's or a miss's background and border, as the prompt-cache block rows draw them (ui/cache_blocks.py)."""
    background, border = STATUS_STYLE[HIT if hit else MISS]
    return f"background:{background};border:{border}"


def block_chips(blocks: list[bool], block_size: int) -> str:
    """One small square per block of the prompt, a hit where its K/V was reused; past MAX_CHIPS, a count."""
    chips = "".join(
        f"<span class='tpe-block-{'hit' if hit else 'miss'}' title='block {i} (tokens {i * block_size:,} to "
        f"{(i + 1) * block_size - 1:,}): {'reused' if hit else 'prefilled'}' style='display:inline-block;width:9px;"
        f"height:14px;margin:1px;border-radius:2px;box-sizing:border-box;{_colours(hit)}'></span>"
        for i, hit in enumerate(blocks[:MAX_CHIPS]))
    more = f" <small>+{len(blocks) - MAX_CHIPS} blocks</small>" if len(blocks) > MAX_CHIPS else ""
    return f"<span style='white-space:normal;line-height:1'>{chips}</span>{more}"


def legend() -> str:
    return (f"<span style='{_colours(True)};padding:0 6px;border-radius:3px'>hit: reused block</span> "
            f"<span style='{_colours(False)};padding:0 6px;border-radius:3px'>miss: prefilled block</span>")


def provider_cell(audited, cost: dict | None) -> str:
    """What OpenAI, Anthropic and vLLM would have reported as cached and billed for this request (the cache
    audit's replay and bill); a dash when its body was too long to keep."""
    if audited is None or cost is None:
        return "—"
    lines = []
    for p, label in PROVIDERS:
        if p == "anthropic":
            a = audited.anthropic
            said = f"read {a.cache_read_input_tokens:,}, write {a.cache_creation_input_tokens:,}"
        else:
            said = f"cached {audited.cached_tokens[p]:,}"
        lines.append(f"{label}: {said} · ${cost[p]['with_cache']:.5f}")
    return "<br>".join(lines)


def safe_link(url: str) -> str | None:
    """The run's link as a path on the server showing the page ('/journey?link=CODE'), None if it is not an http
    link. The host is dropped: the server wrote it from the request's Host header, which the client chooses."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.path.startswith("/") or parts.path.startswith("//"):
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


def request_row(r: TrafficRecord, audited=None, cost: dict | None = None) -> str:
    when = datetime.fromtimestamp(r.at, timezone.utc).strftime("%H:%M:%S")
    link = safe_link(r.run_link)
    opened = (f"<a href='{html_text(link)}' target='_self' class='tpe-run-link'>open run #{r.number}</a>" if link
              else f"#{r.number}")
    cells = [opened, when + " UTC", html_text(r.client) or "—", html_text(r.model), f"{r.prompt_tokens:,}",
             f"{r.cached_tokens:,} ({r.hit_rate:.0%})", f"{r.new_tokens:,}",
             shown(r.ttft_s) if r.ttft_s is not None else "—", shown(r.tpot_s) if r.tpot_s is not None else "—",
             html_text(r.answer_start[:60]) + ("…" if len(r.answer_start) > 60 else ""),
             block_chips(r.blocks, r.block_size), provider_cell(audited, cost)]
    return f"<tr class='tpe-traffic-row'>{''.join(f'<td style={CELL!r}>{c}</td>' for c in cells)}</tr>"


def traffic_table(rows: list[str]) -> str:
    head = "".join(f"<th style='{CELL};text-align:left'>{h}</th>" for h in HEAD)
    return (f"<div style='overflow-x:auto'><table style='border-collapse:collapse;font-size:0.85em'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")
