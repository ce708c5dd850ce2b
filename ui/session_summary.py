""""My session": one self-contained HTML file a learner takes home, opened with no request leaving the machine (as
the run report: plotly.js embedded once, ui/report.py): the views they visited in order, each a link back to that
view (it works while the server is up) with its question, answer and the first token's candidates as they were, the
notes they wrote, and their poll answers.

    html = session_summary_html(visits, notes, poll_answers, made_at="2026-12-06 14:10")

A visit is {"title", "link", "question", "model", "answer", "top": [[label, probability], ...]} (views/chrome/
my_session.py records them); every text in it is the learner's or the model's, escaped here.
"""
from __future__ import annotations

import plotly.graph_objects as go

from .escape import html_text, plotly_label
from .report import STYLE, figure_html, plotly_js

EXTRA_STYLE = """.visit{border:1px solid #e5e7eb;border-radius:10px;padding:.6rem 1rem;margin:1rem 0}
.note-text{background:#fffbe6;border-left:4px solid #f5c518;padding:.5rem .8rem;white-space:pre-wrap}
.empty{color:#777;font-style:italic}"""


def _top_chart(top: list) -> str:
    """The first answer token's candidates as the learner saw them: a horizontal bar per candidate."""
    labels = [plotly_label(f"({i}) {label}") for i, (label, _) in enumerate(top)]
    fig = go.Figure(go.Bar(x=[p for _, p in top][::-1], y=labels[::-1], orientation="h"))
    fig.update_layout(title="The first answer token's candidates", xaxis_tickformat=".0%")
    return figure_html(fig, height=90 + 26 * len(top))


def _visit(n: int, visit: dict, note: str | None) -> str:
    link = str(visit.get("link", ""))
    href = html_text(link) if link.startswith(("http://", "https://", "/")) else ""
    title = html_text(str(visit.get("title", "")))
    parts = [f"<div class='visit'><h3>{n}. " + (f"<a href='{href}'>{title}</a>" if href else title) + "</h3>"]
    if visit.get("question"):
        parts.append(f"<p><b>Question</b> ({html_text(str(visit.get('model', '')))}): "
                     f"{html_text(str(visit['question']))}</p>")
    if visit.get("answer") is not None:
        parts.append(f"<p><b>Answer</b></p><pre>{html_text(str(visit['answer'])) or '(empty answer)'}</pre>")
    if visit.get("top"):
        parts.append(_top_chart(visit["top"]))
    if note:
        parts.append(f"<p><b>Your note</b></p><div class='note-text'>{html_text(note)}</div>")
    if href:
        parts.append(f"<p class='note'>Open this view again (while the app's server is up): <a href='{href}'>"
                     f"{html_text(link[:200])}</a></p>")
    return "".join(parts) + "</div>"


def _poll_answers(answers: list) -> str:
    if not answers:
        return "<p class='empty'>No poll answers in this session.</p>"
    rows = "".join("<tr>" + "".join(f"<td>{html_text(str(a.get(k, '')))}</td>"
                                    for k in ("question", "yours", "class", "real")) + "</tr>" for a in answers)
    return ("<table><tr><th>Poll</th><th>Your answer</th><th>The class</th><th>The model's real answer</th></tr>"
            f"{rows}</table>")


def session_summary_html(visits: list[dict], notes: dict[str, str], poll_answers: list, made_at: str = "") -> str:
    """The whole summary as one HTML page (no request leaves the machine when it is opened)."""
    shown_notes = set()
    body = [f"<h1>My session</h1><p class='note'>Token Pipeline Explorer{', ' + html_text(made_at) if made_at else ''}"
            f". {len(visits)} views visited, {len(notes)} notes.</p>", "<h2>The views I visited, in order</h2>"]
    if not visits:
        body.append("<p class='empty'>No views visited yet.</p>")
    for n, visit in enumerate(visits, 1):
        link = visit.get("link", "")
        note = notes.get(link) if link not in shown_notes else None
        shown_notes.add(link)
        body.append(_visit(n, visit, note))
    rest = {link: note for link, note in notes.items() if link not in shown_notes}
    body.append("<h2>My notes</h2>")
    body += [f"<p class='note'>{html_text(link[:200])}</p><div class='note-text'>{html_text(note)}</div>"
             for link, note in rest.items()] or ["<p class='note'>Each note is shown with its view above.</p>"
                                                 if notes else "<p class='empty'>No notes.</p>"]
    body += ["<h2>My poll answers</h2>", _poll_answers(poll_answers)]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>My session: Token Pipeline Explorer</title>"
            f"<style>{STYLE}\n{EXTRA_STYLE}</style><script>{plotly_js()}</script></head><body>"
            + "\n".join(body) + "</body></html>")
