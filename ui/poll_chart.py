"""A poll's class view as one chart: the class's answers as bars (share of the class), the model's own figure beside
them (a token's probability, a position's attention weight) as markers, the real answer in green and the viewer's
own answer outlined. Presenter mode and the room summary draw the same figure. Every answer is learners' text:
labels go through `plotly_label`."""
from __future__ import annotations

import plotly.graph_objects as go

from .escape import plotly_label

REAL = "#2a9d8f"
CLASS = "#8fb3d9"
MINE = "#e76f51"
TICK_CHARS = 24  # a tick shows this much of an answer (the whole answer, at most 200 characters, on hover)
MODEL_NAMES = {"next_token": "the model's probability", "attention": "the head's attention weight"}


def class_view_figure(kind: str, rows, mine: str | None = None, height: int = 380) -> go.Figure:
    """rows: pipeline.server.polls.tally.Row, in order; mine: the row (its answer) to outline, if any."""
    total = max(sum(r.count for r in rows), 1)
    labels = [plotly_label(r.answer) + (" ✓" if r.real else "") for r in rows]
    fig = go.Figure(go.Bar(
        x=labels, y=[r.count / total for r in rows], name="share of the class",
        text=[str(r.count) for r in rows], textposition="outside",
        marker=dict(color=[REAL if r.real else CLASS for r in rows],
                    line=dict(color=[MINE if mine is not None and r.answer == mine else "rgba(0,0,0,0)" for r in rows],
                              width=4)),
        hovertemplate="%{x}<br>%{text} learners (%{y:.0%})<extra></extra>"))
    ticks = [plotly_label(_cut(r.answer)) + (" ✓" if r.real else "") for r in rows]
    if kind in MODEL_NAMES:
        shown = [(label, r.model) for label, r in zip(labels, rows) if r.model is not None]
        fig.add_trace(go.Scatter(x=[s[0] for s in shown], y=[s[1] for s in shown], mode="markers",
                                 name=MODEL_NAMES[kind], marker=dict(symbol="line-ew-open", size=30, color="#264653",
                                                                     line=dict(width=4)),
                                 hovertemplate="%{x}<br>" + MODEL_NAMES[kind] + " %{y:.1%}<extra></extra>"))
    fig.update_xaxes(tickvals=labels, ticktext=ticks)
    fig.update_layout(height=height, yaxis_tickformat=".0%", yaxis_title="share", xaxis_type="category",
                      legend=dict(orientation="h", y=1.15), margin=dict(t=40, b=10, l=10, r=10), bargap=0.3)
    return fig


def _cut(answer: str) -> str:
    """'a very long answer …' at TICK_CHARS characters (cut before escaping: never half an entity)."""
    return answer if len(answer) <= TICK_CHARS else answer[:TICK_CHARS - 1] + "…"
