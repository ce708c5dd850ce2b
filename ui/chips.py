"""Token chips as HTML: one coloured box per token, text escaped (no streamlit here)."""
from __future__ import annotations

from .escape import html_text
from .more_below import fold

ROLE_COLOURS = {  # background per role; template-added text is grey so the user's own words stand out
    "system": "#dbeafe",
    "user": "#dcfce7",
    "assistant": "#fef3c7",
    "template": "#e5e7eb",
    "accepted": "#86efac",  # a speculative draft the model agreed with (views/pages/faster_decode/drafts.py)
    "rejected": "#fca5a5",  # one it did not: rolled back
}
SPECIAL_STYLE = "border:2px solid #dc2626;font-weight:600;"


def chip(text: str, token_id: int | None = None, role: str = "user", special: bool = False,
         title: str = "", background: str | None = None) -> str:
    bg = background or ROLE_COLOURS.get(role, "#f3f4f6")
    extra = SPECIAL_STYLE if special else "border:1px solid #cbd5e1;"
    sub = (f"<sub style='color:#64748b;font-size:0.7em;margin-left:3px'>{int(token_id)}</sub>"
           if token_id is not None else "")
    tip = f" title='{html_text(title)}'" if title else ""
    return (f"<span{tip} style='display:inline-block;background:{bg};{extra}border-radius:6px;"
            f"padding:1px 5px;margin:2px;font-family:monospace;font-size:0.9em;color:#111;"
            f"white-space:pre'>{html_text(text)}{sub}</span>")


SURPRISAL_CAP_BITS = 12.0  # the colour scale's red end: a token the model gave about 1 in 4,000


def surprisal_colour(bits: float | None) -> str:
    """0 bits (certain) -> pale green, 6 bits -> yellow, 12 bits and more -> red; None (not scored) -> grey."""
    if bits is None:
        return "#e5e7eb"
    x = min(max(bits / SURPRISAL_CAP_BITS, 0.0), 1.0)
    hue = 120 * (1 - x)  # HSL hue: 120 green, 60 yellow, 0 red
    return f"hsl({hue:.0f},75%,{85 - 10 * x:.0f}%)"


def surprisal_chips(labels: list[str], ids: list[int], bits: list[float | None], titles: list[str],
                    shown: int | None = None) -> str:
    """One chip per token coloured by its surprisal (labels: readable token text; titles: hover text).
    shown: chips drawn before the rest fold under "N more tokens below" (ui/more_below.py)."""
    body = fold([chip(label, i, title=title, background=surprisal_colour(b))
                 for label, i, b, title in zip(labels, ids, bits, titles)], shown)
    return f"<div style='line-height:2.1'>{body}</div>"


GROUP_STYLE = ("display:inline-flex;flex-direction:column;align-items:center;vertical-align:bottom;"
               "border:1px dashed #64748b;border-radius:8px;padding:0 2px 1px;margin:2px;background:#f8fafc")


def token_chips(tokens, show_ids: bool = True, pieces=None, shown: int | None = None) -> str:
    """tokens: Token records (index, id, text, role, special) -> one HTML block of chips.

    pieces (pipeline.text.pieces.Piece per token, optional): tokens that are only parts of one character
    are bracketed together under that character, each chip still showing its own bytes.
    shown: tokens drawn before the rest fold under "N more tokens below" (ui/more_below.py); None: all.
    """
    tokens = list(tokens)
    if pieces is None:
        body = fold([_token_chip(t, show_ids) for t in tokens], shown)
    else:
        chips, sizes, k = [], [], 0  # joined once: `body += chip` copied the whole block at each of 10,000 chips
        while k < len(tokens):
            p = pieces[k]
            n = p.parts if p.partial and p.part == 1 else 1
            if n == 1:
                chips.append(_token_chip(tokens[k], show_ids, p))
            else:
                inner = "".join(_token_chip(t, show_ids, q) for t, q in zip(tokens[k:k + n], pieces[k:k + n]))
                chips.append(f"<span style='{GROUP_STYLE}' title='{html_text(_group_title(p, tokens[k].index, n))}'>"
                             f"<span style='font-size:1.15em;font-weight:600;color:#111;line-height:1.3'>"
                             f"{html_text(p.group_text)}</span><span style='white-space:nowrap'>{inner}</span></span>")
            sizes.append(n)
            k += n
        body = fold(chips, shown, sizes=sizes)
    return f"<div style='line-height:2.1'>{body}</div>"


def _token_chip(t, show_ids: bool, piece=None) -> str:
    title = f"#{t.index} id {t.id} · {t.role}"
    if piece is not None and not piece.special:
        title += f" · bytes {piece.byte_hex}"
        if piece.partial:
            title += f" · part {piece.part} of {piece.parts} of {piece.group_text}"
    return chip(t.text, t.id if show_ids else None, t.role, t.special, title)


def _group_title(piece, first_index: int, n: int) -> str:
    return (f"{piece.group_text}: one character spelled by {n} tokens (#{first_index}–#{first_index + n - 1}); "
            "each token alone is only some of its UTF-8 bytes")


def text_spans(pieces, roles=None, shown: int | None = None) -> str:
    """The original text with each token's stretch highlighted (alternating tints; a character that
    several tokens spell is one stretch, outlined). pieces: pipeline.text.pieces.Piece per token.
    shown: tokens drawn before the rest fold under "N more tokens below"."""
    out, sizes, k = [], [], 0
    shade = 0
    while k < len(pieces):
        p = pieces[k]
        n = p.parts if p.partial else 1
        group = pieces[k:k + n]
        raw = b"".join(q.raw for q in group)
        text = group[0].text if p.special else raw.decode("utf-8", errors="replace")
        role = roles[k] if roles else "user"
        bg = ROLE_COLOURS.get(role, "#f3f4f6") if shade % 2 == 0 else _DARKER.get(role, "#e2e8f0")
        tip = (f"#{k}: {p.text}" if n == 1 else
               f"#{k}–#{k + n - 1}: {' '.join(q.text for q in group)} → {p.group_text}")
        outline = "outline:1px dashed #475569;" if n > 1 else ""
        special = "color:#b91c1c;font-weight:600;" if p.special else ""
        body = _visible_breaks(html_text(text))
        out.append(f"<span title='{html_text(tip)}' style='background:{bg};{outline}{special}border-radius:3px'>"
                   f"{body}</span>")
        sizes.append(n)
        shade += 1
        k += n
    return ("<div style='font-family:monospace;white-space:pre-wrap;font-size:1em;line-height:1.9;padding:10px;"
            "border:1px solid #cbd5e1;border-radius:8px;background:#fff;color:#111'>" + fold(out, shown, sizes=sizes)
            + "</div>")


def _visible_breaks(body: str) -> str:
    """Line breaks drawn as marks (a newline also breaks the line). No raw CR or LF is left: a blank line, even
    '\r\r', would end the HTML block and Markdown would read the rest."""
    return (body.replace("\r", "<span style='color:#94a3b8'>␍</span>")
            .replace("\n", "<span style='color:#94a3b8'>↵</span><br>"))


_DARKER = {"system": "#bfdbfe", "user": "#bbf7d0", "assistant": "#fde68a", "template": "#d1d5db"}


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
        body = _visible_breaks(body)  # newlines are tokens too: show them
        out.append(f"<span style='background:{bg}' title='{html_text(seg.role)}'>{body}</span>")
    return ("<div style='font-family:monospace;white-space:pre-wrap;font-size:0.9em;line-height:1.8;padding:10px;"
            "border:1px solid #cbd5e1;border-radius:8px;background:#fff;color:#111'>" + "".join(out) + "</div>")


def draft_rounds(rounds, shown: int | None = None) -> str:
    """Speculative decoding's verify passes, one line each: (step, (text, id) fed, [(text, id) accepted],
    [(text, id) rejected]) -> HTML: the token fed in grey, then its drafts in green (accepted) and red (rejected).
    shown: lines drawn before the rest fold under "N more steps below"."""
    lines = []
    for step, (text, tid), accepted, rejected in rounds:
        body = chip(text, tid, role="template", title=f"step {step}: the token fed")
        body += "".join(chip(t, i, role="accepted", title="accepted: the model's own choice here") for t, i in accepted)
        body += "".join(chip(t, i, role="rejected", title="rejected: rolled back") for t, i in rejected)
        lines.append(f"<div><span style='color:#64748b;font-size:0.8em;display:inline-block;width:4.5em'>"
                     f"step {int(step)}</span>{body}</div>")
    return f"<div style='line-height:2.1'>{fold(lines, shown, 'step')}</div>"
