"""Token chips as HTML: one coloured box per token, text escaped (no streamlit here)."""
from __future__ import annotations

from .escape import html_text

ROLE_COLOURS = {  # background per role; template-added text is grey so the user's own words stand out
    "system": "#dbeafe",
    "user": "#dcfce7",
    "assistant": "#fef3c7",
    "template": "#e5e7eb",
}
SPECIAL_STYLE = "border:2px solid #dc2626;font-weight:600;"


def chip(text: str, token_id: int | None = None, role: str = "user", special: bool = False,
         title: str = "") -> str:
    bg = ROLE_COLOURS.get(role, "#f3f4f6")
    extra = SPECIAL_STYLE if special else "border:1px solid #cbd5e1;"
    sub = (f"<sub style='color:#64748b;font-size:0.7em;margin-left:3px'>{int(token_id)}</sub>"
           if token_id is not None else "")
    tip = f" title='{html_text(title)}'" if title else ""
    return (f"<span{tip} style='display:inline-block;background:{bg};{extra}border-radius:6px;"
            f"padding:1px 5px;margin:2px;font-family:monospace;font-size:0.9em;color:#111;"
            f"white-space:pre'>{html_text(text)}{sub}</span>")


def token_chips(tokens, show_ids: bool = True) -> str:
    """tokens: Token records (index, id, text, role, special) -> one HTML block of chips."""
    return "<div style='line-height:2.1'>" + "".join(
        chip(t.text, t.id if show_ids else None, t.role, t.special, f"#{t.index} id {t.id} · {t.role}")
        for t in tokens) + "</div>"


def legend(roles=("system", "user", "assistant", "template")) -> str:
    parts = [chip(r, None, r) for r in roles]
    parts.append(chip("special token", None, "template", special=True))
    return "<div>" + "".join(parts) + "</div>"


def highlighted_template(segments, special_pieces: list[str]) -> str:
    """The rendered prompt as a <pre>: each segment tinted by role, special tokens boxed in red."""
    out = []
    for seg in segments:
        bg = ROLE_COLOURS.get(seg.role, "#f3f4f6")
        body = html_text(seg.text)
        if seg.role == "template":
            for piece in sorted(set(special_pieces), key=len, reverse=True):
                safe = html_text(piece)
                body = body.replace(safe, f"<b style='color:#b91c1c;border:1px solid #dc2626;border-radius:4px;"
                                          f"padding:0 2px'>{safe}</b>")
        body = body.replace("\n", "<span style='color:#94a3b8'>↵</span><br>")  # newlines are tokens too: show them
        out.append(f"<span style='background:{bg}' title='{html_text(seg.role)}'>{body}</span>")
    return ("<div style='font-family:monospace;white-space:pre-wrap;font-size:0.9em;line-height:1.8;padding:10px;"
            "border:1px solid #cbd5e1;border-radius:8px;background:#fff;color:#111'>" + "".join(out) + "</div>")
