"""Prompt-cache block rows as HTML: one box per block coloured by status, the divergent token
marked. Every token string goes through html_text."""
from __future__ import annotations

from pipeline.prompt_cache.outcomes import HIT, MISS, NOT_CACHEABLE, RECOMPUTED

from .escape import html_text

STATUS_STYLE = {  # background, border
    HIT: ("#bbf7d0", "2px solid #16a34a"),
    MISS: ("#fed7aa", "2px solid #ea580c"),
    RECOMPUTED: ("#dcfce7", "2px dashed #16a34a"),
    NOT_CACHEABLE: ("#e5e7eb", "2px dashed #6b7280"),
}
DIVERGENT_STYLE = "box-shadow:0 0 0 3px #dc2626;"


def block_legend() -> str:
    labels = {HIT: "hit: K/V read from the cache", MISS: "miss: computed, then stored",
              RECOMPUTED: "cached, but run again: the last prompt token must go through the model",
              NOT_CACHEABLE: "not cacheable: partial block, computed, never stored"}
    return "<div style='margin:4px 0 8px 0'>" + "".join(
        f"<span style='display:inline-block;background:{STATUS_STYLE[s][0]};border:{STATUS_STYLE[s][1]};"
        f"border-radius:5px;padding:1px 8px;margin-right:8px;font-size:0.85em;color:#111'>{html_text(t)}</span>"
        for s, t in labels.items()) + (f"<span style='display:inline-block;border-radius:5px;padding:1px 8px;"
                                       f"font-size:0.85em;{DIVERGENT_STYLE}color:#111'>first divergent token</span>"
                                       "</div>")


def shows_divergence(d: dict | None) -> bool:
    """Worth marking: a changed token, or a cached path that ends after some hits (not an empty cache)."""
    return d is not None and (d["kind"] == "changed" or d["token_index"] > 0)


def block_row_html(row: dict) -> str:
    """One box per block, coloured by status; the text inside is the block's tokens (hover for all)."""
    stats, tokens = row["stats"], row["tokens"]
    bs = stats["block_size"]
    d = stats["divergence"]
    marked = d["token_index"] // bs if shows_divergence(d) else -1
    boxes = []
    for b, status in enumerate(stats["block_status"]):
        bg, border = STATUS_STYLE[status]
        text = "".join(tokens[b * bs:(b + 1) * bs])
        span = f"tokens {b * bs}–{min((b + 1) * bs, len(tokens)) - 1}"
        mark = DIVERGENT_STYLE if b == marked else ""
        flag = f" ▼{d['token_index']}" if b == marked else ""
        boxes.append(
            f"<div title='{html_text(f'block {b} ({span}), {status}: {text}')}' style='min-width:92px;height:46px;"
            f"background:{bg};border:{border};{mark}border-radius:6px;padding:2px 4px;overflow:hidden;color:#111'>"
            # the status on one line, the box as wide as it ('not cacheable' wrapped and pushed the tokens out)
            f"<div style='font-size:0.7em;font-weight:600;white-space:nowrap'>#{b} {html_text(status)}"
            f"{html_text(flag)}</div>"  # the tokens below take the box's width and never widen it (width:0)
            f"<div style='font-family:monospace;font-size:0.62em;white-space:nowrap;overflow:hidden;width:0;"
            f"min-width:100%;text-overflow:ellipsis'>{html_text(text)}</div></div>")
    return "<div style='display:flex;flex-wrap:wrap;gap:5px;margin:4px 0'>" + "".join(boxes) + "</div>"


def divergence_html(row: dict, around: int = 8) -> str:
    """The tokens around the first divergent token, that token boxed in red with the cached one beside it."""
    d = row["stats"]["divergence"]
    if not shows_divergence(d):
        return ""
    i, tokens = d["token_index"], row["tokens"]
    parts = []
    for j in range(max(0, i - around), min(len(tokens), i + around)):
        style = ("background:#fee2e2;border:2px solid #dc2626;font-weight:600;" if j == i
                 else "background:#f1f5f9;border:1px solid #cbd5e1;")
        parts.append(f"<span title='token {j}' style='display:inline-block;{style}border-radius:4px;padding:0 4px;"
                     f"margin:1px;font-family:monospace;font-size:0.85em;color:#111;white-space:pre'>"
                     f"{html_text(tokens[j])}</span>")
    cached = (f" <span style='font-size:0.85em;color:#991b1b'>cached here: "
              f"<code>{html_text(row['cached_token'])}</code></span>" if row["cached_token"] else "")
    return f"<div style='margin:2px 0 6px 0'>token {i}: {''.join(parts)}{cached}</div>"
