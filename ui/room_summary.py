"""The presenter's room summary as one self-contained HTML file: every poll with the class's answers charted beside
the model's real answer, and how many questions learners asked (a count, no names). plotly.js is inlined once, as in
the run's report (ui/report.py), so the file opens with no server and no network; every learner's answer is escaped.

    html = room_summary_html("abc123", [(poll, answers), ...], questions_asked=12)
"""
from __future__ import annotations

import time

from pipeline.server.polls.summary import summary_rows
from pipeline.server.polls.tally import class_view, real_answer, spread

from .escape import html_text
from .poll_chart import class_view_figure
from .report import STYLE, figure_html, table_html, plotly_js
from .words import plural


def room_summary_html(code: str, polls: list, questions_asked: int) -> str:
    """polls: (Poll, its answers) in the order they were opened."""
    parts = [f"<h1>Room {html_text(code)}: summary</h1>",
             f"<p class='note'>Made {html_text(time.strftime('%Y-%m-%d %H:%M'))}. {plural(len(polls), 'poll')}; "
             f"learners asked {plural(questions_asked, 'question')} of their own (a count: no names, no texts).</p>"]
    for n, (poll, answers) in enumerate(polls, start=1):
        parts.append(f"<h2>{n}. {html_text(poll.question)}</h2>")
        revealed = poll.revealed_answers is not None  # a Reveal cut short and then closed froze nothing
        parts.append(f"<p class='note'>{html_text(poll.kind)} · stage {poll.stage} · "
                     f"{plural(len(answers), 'answer')}" + ("" if revealed else " · never revealed") + "</p>")
        parts.append(figure_html(class_view_figure(poll.kind, class_view(poll, answers))))
        parts.append(f"<p><b>The model's real answer:</b> {html_text(real_answer(poll))}</p>")
        numbers = spread(poll, answers)
        if numbers:
            parts.append(f"<p>The class: from {numbers['min']:,} to {numbers['max']:,}, median "
                         f"{numbers['median']:,}.</p>")
    if polls:
        parts += ["<h2>Every answer as a table</h2>", table_html(summary_rows(polls))]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Room summary</title>"
            f"<style>{STYLE}</style><script>{plotly_js()}</script></head><body>"
            + "\n".join(parts) + "</body></html>")
