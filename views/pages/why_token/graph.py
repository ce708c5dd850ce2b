"""Why this token, section 2's chart: the contribution graph on the prompt's own positions, its nodes the control.

Only the positions the routes pass through get a column, in prompt order, each labelled with its position in the
whole prompt ("(662) apples", never its place in the attribution window): on a scale of every position, a long
prompt's routes (gathered in its last few tokens) drew as one pile at the right edge. "…" before a label marks
positions skipped. Clicking a node (a head's marker on its route, an MLP's marker, an input token's) picks it for
the panel below, as the dropdown does.
"""
from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from pipeline.attribution.graph import Graph
from pipeline.attribution.nodes import Node
from ui.escape import plotly_label
from ui.plots import MAX_TICKS, TICK_FONT

KINDS = {"head": ("#2a6f97", "attention head"), "residual": ("#94a3b8", "residual (kept)"), "mlp": ("#e76f51", "MLP")}
PICK_KEY = "why_node_pick"  # the node dropdown's key (views.pages.why_token.qk.node_panel): a click sets it


def columns(g: Graph, last: int) -> list[int]:
    """The window positions the routes pass through, and the last one, in order: one column each."""
    return sorted({e["source"] for e in g.edges} | {e["target"] for e in g.edges} | {last})


def column_labels(cols: list[int], tokens: list[str], positions: tuple[int, ...]) -> list[str]:
    """'(prompt position)token' per column, escaped; '… ' before one that follows skipped positions."""
    return [plotly_label(("… " if k and t - cols[k - 1] > 1 else "") + f"({positions[t]}){tokens[t]}")
            for k, t in enumerate(cols)]


def figure(g: Graph, nodes: list[Node], tokens: list[str], positions: tuple[int, ...], L: int) -> go.Figure:
    """The routes as lines between (column, layer) points, with a marker per node; each marker's customdata is its
    node's index in `nodes` (a head's every route carries its head's index)."""
    cols = columns(g, len(positions) - 1)
    x = {t: k for k, t in enumerate(cols)}
    index = {(n.kind, n.layer, n.head, n.position if n.kind == "token" else None): i for i, n in enumerate(nodes)}
    name = lambda t: f"({positions[t]}) {tokens[t]}"  # noqa: E731
    fig = go.Figure()
    for kind, (colour, title) in KINDS.items():
        xs, ys = [], []
        for e in (e for e in g.edges if e["kind"] == kind):
            lo = e["layer"] + (0.5 if e["stage"] == "mlp" else 0.0)
            xs += [x[e["source"]], x[e["target"]], None]
            ys += [lo, lo + 0.5, None]
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=title, hoverinfo="skip",
                                     line=dict(color=colour, width=1.5)))
    heads = [e for e in g.edges if e["kind"] == "head" and ("head", e["layer"], e["head"], None) in index]
    marks = [("head (click to pick)", "#2a6f97", "circle",
              [((x[e["source"]] + x[e["target"]]) / 2, e["layer"] + 0.25, 6 + 18 * e["share"],
                f"layer {e['layer']} head {e['head']}: {name(e['source'])} → {name(e['target'])}, "
                f"share {e['share']:.2f}", index["head", e["layer"], e["head"], None]) for e in heads]),
             ("MLP (click to pick)", "#e76f51", "square",
              [(x[n.position], n.layer + 0.75, 8 + 18 * n.share, f"layer {n.layer} MLP at {name(n.position)}, "
                f"share {n.share:.2f}", i) for i, n in enumerate(nodes) if n.kind == "mlp"]),
             ("input token (click to pick)", "#6b7280", "diamond",
              [(x[n.position], 0.0, 8 + 18 * n.share, f"token {name(n.position)}, share {n.share:.2f}", i)
               for i, n in enumerate(nodes) if n.kind == "token"])]
    for title, colour, symbol, points in marks:
        if points:
            px_, py, size, text, custom = zip(*points)
            fig.add_trace(go.Scatter(x=px_, y=py, mode="markers", name=title, customdata=list(custom),
                                     text=[plotly_label(t) for t in text], hovertemplate="%{text}<extra></extra>",
                                     marker=dict(size=list(size), color=colour, symbol=symbol)))
    labels = column_labels(cols, tokens, positions)
    step = max(1, -(-len(cols) // MAX_TICKS))
    keep = sorted(range(len(cols) - 1, -1, -step))
    fig.update_layout(height=max(480, 22 * L + 140), margin=dict(t=30, b=10), legend=dict(orientation="h", y=1.05))
    fig.update_xaxes(tickmode="array", tickvals=keep, ticktext=[labels[k] for k in keep],
                     range=[-0.5, len(cols) - 0.5], tickangle=-60, tickfont=TICK_FONT,
                     title="position in the prompt (only those the routes pass through; … : positions skipped)")
    fig.update_yaxes(title="layer (0 = embeddings at the bottom)", range=[-0.5, L + 0.5], tickfont=TICK_FONT)
    return fig


def clicked(event, nodes: list[Node]) -> Node | None:
    """The node a click on the chart picked (st.plotly_chart's selection event), or None."""
    points = (event or {}).get("selection", {}).get("points", []) if isinstance(event, dict) else (
        event.selection.points if event is not None else [])
    for p in points:
        i = p.get("customdata")
        i = i[0] if isinstance(i, list) else i
        if isinstance(i, (int, float)) and 0 <= int(i) < len(nodes):
            return nodes[int(i)]
    return None


def graph_chart(g: Graph, nodes: list[Node], tokens: list[str], positions: tuple[int, ...], L: int) -> None:
    """The chart; a click on a node sets the node dropdown (once per click: the dropdown may be changed after)."""
    event = st.plotly_chart(figure(g, nodes, tokens, positions, L), width="stretch", key="why_graph",
                            on_select="rerun", selection_mode="points")
    node = clicked(event, nodes)
    if node is None:
        st.session_state.pop("why_graph_applied", None)
    elif st.session_state.get("why_graph_applied") != node:
        st.session_state["why_graph_applied"] = node
        st.session_state[PICK_KEY] = node
