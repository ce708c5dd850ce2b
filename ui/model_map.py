"""The architecture map (pipeline/stages/model_map.py's parts) as one block of escaped HTML: each part a link to its
page, the lit parts highlighted (data-lit; by default those the current page is about, ModelMap.lit), the parts that
open the current page marked aria-current. `full` on Start and Journey; the small strip on every other page.

    html = map_html(model_map(dims), current="attention", href=lambda page: f"./{page}?model=gemma-3-270m")
"""
from __future__ import annotations

from typing import Callable

from pipeline.stages.model_map import BLOCKS

from .escape import html_text

KIND_COLOURS = {"full": "#6a4c93", "sliding": "#8ecae6"}  # a block's attention: every position, or a window
PART = ("display:inline-block;border:1px solid #94a3b8;border-radius:6px;padding:{pad};margin:2px;"
        "background:{bg};color:#0f172a;text-decoration:none;vertical-align:middle;line-height:1.25;{extra}")
HIGHLIGHT = "#fde68a"  # the current page's parts
ARROW = "<span style='color:#64748b;margin:0 2px'>→</span>"


def _part(part, current: str, lit: frozenset[str], href: Callable[[str], str], small: bool) -> str:
    on = part.key in lit
    style = PART.format(pad="1px 6px" if small else "4px 8px", bg=HIGHLIGHT if on else "#f8fafc",
                        extra="font-weight:700;border:2px solid #b45309;" if on else "")
    detail = "" if small else f"<br><span style='font-size:0.75em;color:#475569'>{html_text(part.detail)}</span>"
    mark = (" aria-current='page'" if part.page == current else "") + (" data-lit='1'" if on else "")
    return (f"<a class='tpe-map-part' data-part='{html_text(part.key)}' data-page='{html_text(part.page)}' "
            f"href='{html_text(href(part.page))}' target='_self' title='{html_text(part.detail)}'{mark} "
            f"style=\"{style}\">{html_text(part.label)}{detail}</a>")


def _blocks(m, lit: frozenset[str], href: Callable[[str], str], small: bool) -> str:
    """One cell per block, coloured by its attention's kind (full or sliding), each a link to its page."""
    size = "7px;height:12px" if small else "14px;height:22px"
    on = BLOCKS in lit
    flag = " data-lit='1'" if on else ""
    cells = "".join(
        f"<a class='tpe-map-block' data-kind='{b.kind}' data-page='{html_text(b.page)}' "
        f"href='{html_text(href(b.page))}'{flag} "
        f"target='_self' title='{html_text(b.detail)}' style='display:inline-block;width:{size};margin:0 1px;"
        f"background:{KIND_COLOURS[b.kind]};border-radius:2px;"
        f"{'outline:2px solid #b45309;' if on else ''}'></a>" for b in m.blocks)
    kinds = sorted({b.kind for b in m.blocks})
    legend = "" if len(kinds) < 2 else " ".join(
        f"<span style='font-size:0.75em;color:#475569'><span style='display:inline-block;width:10px;height:10px;"
        f"background:{KIND_COLOURS[k]};border-radius:2px'></span> {k} attention "
        f"({sum(b.kind == k for b in m.blocks)})</span>" for k in kinds)
    return f"<span style='white-space:nowrap'>{cells}</span> {legend}"


def map_html(m, current: str, href: Callable[[str], str], small: bool = False,
             lit: frozenset[str] | None = None) -> str:
    """m: a ModelMap; current: the URL path of the page showing it; href: page URL path -> the link's address;
    lit: the keys of the parts to highlight (BLOCKS: every block), by default m.lit(current)."""
    lit = m.lit(current) if lit is None else lit
    part = lambda p: _part(p, current, lit, href, small)  # noqa: E731
    inside = ARROW.join(part(p) for p in m.block_parts)
    n = len(m.blocks)
    box = ("display:inline-block;border:2px dashed #64748b;border-radius:8px;padding:{};margin:2px;"
           "vertical-align:middle").format("2px 4px" if small else "6px 8px")
    blocks = (f"<span class='tpe-map-blocks' style='{box}'><b style='font-size:0.8em'>{n} blocks ×</b> {inside}"
              f"{'<br>' if not small else ' '}{_blocks(m, lit, href, small)}</span>")
    before, after = ARROW.join(part(p) for p in m.before), ARROW.join(part(p) for p in m.after)
    if small:  # one line, wrapping where it must
        body, size = ARROW.join([before, blocks, after]), "0.8em"
    else:  # three rows: up to the first block, the blocks, after the last block
        down = "<div style='color:#64748b;margin-left:24px'>↓</div>"
        body, size = f"<div>{before}</div>{down}<div>{blocks}</div>{down}<div>{after}</div>", "0.95em"
    return (f"<div class='tpe-map' data-size='{'small' if small else 'full'}' style='font-size:{size};"
            f"line-height:{2 if small else 1.6}'>{body}</div>")
