"""Attention: which earlier tokens each token reads from, in every layer and head."""

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from pipeline.model.prefill_record import Prefill
from pipeline.stages import attention as at
from pipeline.text.pieces import token_pieces
from ui.escape import axis_labels, code_span, plotly_label
from ui.plots import TICK_FONT, token_axis
from ui.words import plural
from views.chrome.frame import fragment, page_header
from views.chrome.navigation import back_next
from views.links import url_state
from views.links.controls import declare, linked
from views.links.params import WIDE, choice, integer
from views.pages.attention.answer import attention_ids
from views.pages.attention.by_hand import by_hand
from views.pages.attention.shared_kv import shared_kv
from views.request.runs import run_for_page
from views.server.state import get_model

WINDOW = 256  # most query/key positions drawn: a W × W heatmap of 65,536 cells stays quick in the browser
SINKS = 4  # first tokens kept as columns in a long prompt's grid: heads park much of their weight there
POOLED = 128  # blocks per side of a long prompt's whole grid, shrunk
TILE = 16  # positions per head in the all-heads overview (the last ones): 30 × 9 tiles of 16 × 16
SCALE_HELP = {"linear": "weights as they are: 0 % white, 100 % darkest",
              "sqrt": "square root: small weights (1–5 %) become visible",
              "log": "log scale: every factor of 10 gets the same colour step, from 0.01 % to 100 %"}

page_header("Attention", "Inside every layer, each token looks back at the tokens before it and decides how much "
            "of each to take in. One grid per head: row = the token that is looking (query), column = the token "
            "looked at (key). Each row adds up to 100 %. Cells to the right of the diagonal are the future: "
            "a token may never see them, so they are masked.")
trace = run_for_page()
tok = get_model().tokenizer
m = trace.dims
ids, p, run_key = attention_ids(trace)  # the prompt, or the prompt and the answer
L, H, Hkv, Dh = m.L, m.H, m.Hkv, m.Dh
T = len(ids)
windows = tuple(m.window(i) for i in range(L))  # (L,) each layer's sliding window, None = full
sliding = [i for i, w in enumerate(windows) if w is not None]
pieces = token_pieces(tok, ids)  # '토 (1/3)' for a token that is part of a character
names = [q.label for q in pieces]
labels = axis_labels(names)  # unique and escaped, for plotly
plain = [f"({i}){n}" for i, n in enumerate(names)]  # widgets show text as text
start = max(0, T - WINDOW)  # first query position shown; 0 unless the prompt is longer than WINDOW


@st.cache_data(max_entries=4, show_spinner="Reading every head once...")
def overview(request_id: str, ids: tuple[int, ...], windows: tuple, _p: Prefill) -> tuple[np.ndarray, np.ndarray]:
    """((L, H, n, n) the last n positions of every head, (L, H, T) the last row of every head): small."""
    return at.overview_tiles(_p, TILE, windows), at.last_rows(_p, windows)


@st.cache_data(max_entries=16, show_spinner="Computing this layer's attention...")
def layer_window(request_id: str, ids: tuple[int, ...], layer: int, start: int, window: int | None,
                 _p: Prefill) -> tuple[np.ndarray, int]:
    """((H, T - start, C) float32, sinks kept): query rows start..T-1 over the shown key columns, i.e.
    all T keys, or for a long prompt the first SINKS keys, the rest before `start` summed, then start..T-1.

    Only this small window is cached (2.4 MB at most), so moving between layers is a lookup after the
    first visit. The cache key is plain values (request id, prompt ids, layer, start), never the tensors.
    """
    rows = at.attention_for_layer(_p, layer, first_row=start, window=window)  # (H, W, T)
    if not start:
        return rows, 0
    return at.windowed(rows, start, SINKS)


@st.cache_data(max_entries=16, show_spinner="Shrinking the whole prompt's grid...")
def whole_prompt(request_id: str, ids: tuple[int, ...], layer: int, head: int, window: int | None,
                 _p: Prefill) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One head's (T, T) grid pooled into blocks (at.pooled_head): 64 KB at most."""
    return at.pooled_head(_p, layer, head, window, POOLED)


tiles, last = overview(run_key, tuple(ids), windows, p)  # (L, H, n, n), (L, H, T)
entropy = at.entropy_bits(last)  # (L, H) bits, low = focused
best_layer, best_head = at.sharpest_head(last)
if st.session_state.get("at_run_id") not in (None, trace.request.id):  # the request changed: open on a head
    st.session_state.update(at_layer=best_layer, at_head=best_head)  # with visible structure in the new run
st.session_state.at_run_id = trace.request.id
declare("at_layer", integer(0, L - 1), older=("layer",))  # here, before the overview reads them: a link's win
declare("at_head", integer(0, H - 1), older=("head",))  # (the sliders are drawn in one_head below)
st.session_state.setdefault("at_layer", best_layer)  # unless a link chose one; widget state is also dropped
st.session_state.setdefault("at_head", best_head)  # while another page is shown

scale = linked(st.radio, "at_scale", choice(at.SCALES), "colour scale", at.SCALES, index=1, horizontal=True,
               older=("scale",), format_func=str.capitalize, help="; ".join(f"{k}: {v}" for k, v in SCALE_HELP.items()))


def colour_axis(z: np.ndarray) -> dict:
    """Heatmap settings for weights z on the chosen scale, with the colour bar labelled in weights."""
    values, tickvals, ticktext = at.colour_values(z, scale)
    lo, hi = tickvals[0], tickvals[-1]
    return dict(z=values, colorscale="Blues", zmin=lo, zmax=hi,
                colorbar=dict(title="weight", tickvals=tickvals, ticktext=ticktext, tickfont=TICK_FONT))


def layer_kinds_text() -> str:
    """What kind of attention each layer runs, in words, from the model's dims."""
    if not sliding:
        return f"All {L} layers use full attention: every token can read every token before it."
    w = m.sliding_window
    full = [i for i in range(L) if windows[i] is None]
    text = (f"**Two kinds of layer.** {plural(len(sliding), 'layer')} use a *sliding window*: each token reads only "
            f"the last {w:,} positions, itself included. The other {plural(len(full), 'layer')} "
            f"({', '.join(str(i) for i in full)}) use full attention and read every earlier token. ")
    if T > w:
        return text + (f"This prompt has {T:,} tokens, more than the window, so in a sliding layer a token at "
                       f"position {w:,} or later gets exactly 0 % from the tokens {w:,} or more positions back: "
                       "open a sliding layer below to see those cells greyed out.")
    return text + (f"This prompt has {T:,} tokens, fewer than {w:,}, so here the window hides nothing and both kinds "
                   f"look alike; a prompt longer than {w:,} tokens shows the difference.")


# --- all heads at a glance ---------------------------------------------------------------------------
def all_heads() -> None:
    """Every head's last positions as one grid of tiles, the head shown below framed: drawn in the fragment
    `heads` with it, so picking a layer or a head there moves the frame too."""
    st.subheader("All heads at a glance")
    n = tiles.shape[-1]
    grid = at.tile_grid(tiles.transpose(1, 0, 2, 3))  # heads down, layers across: (H*(n+1)-1, L*(n+1)-1)
    over = go.Figure(go.Heatmap(**colour_axis(grid), hoverinfo="skip", showscale=False))
    centres = np.arange(L) * (n + 1) + (n - 1) / 2, np.arange(H) * (n + 1) + (n - 1) / 2
    cx, cy = np.meshgrid(*centres)  # (H, L) each
    focus = np.array([[names[int(last[l_, h].argmax())] for l_ in range(L)] for h in range(H)])
    over.add_trace(go.Scatter(
        x=cx.ravel(), y=cy.ravel(), mode="markers", marker=dict(size=22, opacity=0.01, color="#000"),
        customdata=np.stack([np.tile(np.arange(L), H), np.repeat(np.arange(H), L)], axis=1),
        hovertext=[plotly_label(f"layer {l_}, head {h}: last row {entropy[l_, h]:.1f} bits, most weight on "
                                f"{focus[h, l_]}") for h in range(H) for l_ in range(L)],
        hoverinfo="text", showlegend=False))
    sel_l, sel_h = int(st.session_state.at_layer), int(st.session_state.at_head)
    over.add_shape(type="rect", x0=sel_l * (n + 1) - 1, x1=sel_l * (n + 1) + n, y0=sel_h * (n + 1) - 1,
                   y1=sel_h * (n + 1) + n, line=dict(color="#dc2626", width=3))
    over.update_layout(height=60 + 40 * H, margin=dict(t=10, l=10, r=10, b=10), clickmode="event+select",
                       dragmode=False)
    kinds = [str(i) + (f"<br>{'full' if w is None else f'win {w}'}" if sliding else "") for i, w in enumerate(windows)]
    over.update_xaxes(title="layer (L)" + (": sliding window (win) or full attention" if sliding else ""),
                      tickvals=centres[0], ticktext=kinds, tickfont=TICK_FONT,
                      showgrid=False, zeroline=False, range=[-1.5, grid.shape[1] + 0.5])
    over.update_yaxes(title="query head (H)", tickvals=centres[1], ticktext=[str(h) for h in range(H)],
                      tickfont=TICK_FONT, showgrid=False, zeroline=False, range=[grid.shape[0] + 0.5, -1.5])

    def open_clicked() -> None:
        """A click anywhere on a tile (its marker or its cells) opens that head: tile = position // (n + 1)."""
        points = st.session_state.at_overview.selection.points
        if not points or points[0].get("x") is None or points[0].get("y") is None:
            return
        layer = min(max(int(round(float(points[0]["x"]))) // (n + 1), 0), L - 1)
        head = min(max(int(round(float(points[0]["y"]))) // (n + 1), 0), H - 1)
        st.session_state.update(at_layer=layer, at_head=head)

    st.plotly_chart(over, width="stretch", key="at_overview", on_select=open_clicked, selection_mode="points")
    st.caption(f"Every tile is one head: its attention among the last {plural(n, 'position')} "
               f"(tokens {T - n}–{T - 1}), on the "
               f"colour scale above. Vertical stripes = a head that keeps reading one token; a bright diagonal = a "
               f"head that reads the token itself or its neighbour. Click a tile (or use the controls below) to open "
               f"it. A new question opens on layer {best_layer}, head {best_head}: of the heads whose favourite is not "
               f"the very first token, its last row is the most focused ({entropy[best_layer, best_head]:.1f} bits; "
               f"spreading evenly over all {T:,} tokens would be {np.log2(T):.1f} bits).")
    st.markdown(layer_kinds_text())


# --- one head ----------------------------------------------------------------------------------------
def key_columns(sinks: int) -> tuple[list[int | None], list[str]]:
    """Key position of every drawn column (None = the summed column) and its axis label."""
    if not start:
        return list(range(T)), labels
    if not sinks:
        return list(range(T)), labels
    cols = list(range(sinks)) + [None] + list(range(start, T))
    text = labels[:sinks] + [plotly_label(f"tokens {sinks}–{start - 1}, summed")] + labels[start:]
    return cols, text


def one_head() -> None:
    st.subheader("One head")
    c1, c2 = st.columns(2)
    layer = c1.slider("layer", 0, L - 1, key="at_layer")
    head = c2.selectbox("query head", range(H), key="at_head",
                        format_func=lambda h: f"head {h} (reads KV head {m.kv_head(h)}; last row "
                                              f"{entropy[layer, h]:.1f} bits)")
    window = windows[layer]
    rows, sinks = layer_window(run_key, tuple(ids), layer, start, window, p)  # (H, W, C)
    A = rows[head]  # (W, C) rows = queries start..T-1
    cols, xlabels = key_columns(sinks)
    queries = np.arange(start, T)
    drawn = [-1 if c is None else c for c in cols]  # the summed column (-1) is never masked as a whole
    masked = at.hidden_keys(queries, drawn, window) & (np.array(drawn) >= 0)  # (W, C)
    beyond = masked & (np.array(drawn)[None, :] <= queries[:, None])  # (W, C) outside the sliding window
    fig = go.Figure([
        go.Heatmap(**colour_axis(np.where(masked, np.nan, A)), x=xlabels, y=labels[start:], customdata=A,
                   hovertemplate="query %{y}<br>key %{x}<br>weight %{customdata:.2%}<extra></extra>"),
        go.Heatmap(z=np.where(masked & ~beyond, 1.0, np.nan), x=xlabels, y=labels[start:], showscale=False,
                   colorscale=[[0, "#e5e5e5"], [1, "#e5e5e5"]],
                   hovertemplate="query %{y}<br>key %{x}<br>future: masked (−∞ → 0 %)<extra></extra>"),
    ])
    if beyond.any():
        fig.add_trace(go.Heatmap(z=np.where(beyond, 1.0, np.nan), x=xlabels, y=labels[start:], showscale=False,
                                 colorscale=[[0, "#fcd34d"], [1, "#fcd34d"]],
                                 hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{window:,} or more positions back: "
                                               "outside the sliding window (−∞ → 0 %)<extra></extra>"))
    W = T - start
    size = f"T × T = {T} × {T}" if not start else f"the last {W} of T = {T:,} query positions"
    kind = "full attention" if window is None else f"sliding window of {window:,}"
    fig.update_layout(height=min(900, max(480, 16 * W + 200)), margin=dict(t=60, l=10, r=10, b=10),
                      title=f"layer {layer}, head {head} ({kind}): attention weights ({size})<br>"
                            "<sup>grey = masked future" + ("; yellow = outside the window" if beyond.any() else "")
                            + "</sup>")
    token_axis(fig, "x", xlabels, angle=-60, title="key position (T): the token looked at",
               always=range(sinks + 1) if sinks else ())  # the first tokens and the summed column stay named
    token_axis(fig, "y", labels[start:], title="query position (T): the token looking", autorange="reversed")
    st.plotly_chart(fig, width="stretch", key="at_heatmap")
    if start and sinks:
        on_sinks = A[:, :sinks].sum(axis=-1)  # (W,)
        middle = A[:, sinks]  # (W,)
        st.caption(f"The prompt has T = {T:,} tokens; the grid shows only the last {W} query positions "
                   f"({start}–{T - 1}). "
                   f"Its columns keep the first {sinks} tokens, where many heads park spare weight (attention "
                   f"sinks): here they get {on_sinks.min():.0%}–{on_sinks.max():.0%} of each row. The column "
                   f"“tokens {sinks}–{start - 1}, summed” adds up the {start - sinks:,} tokens in between "
                   f"({middle.min():.0%}–{middle.max():.0%} per row), so every row still adds up to 100 %.")
    if window is not None:
        st.caption(window_caption(window, beyond))
    if start:
        shrunk(layer, head, window)
    one_row(A, cols, xlabels, sinks)
    shared_kv(m, names, head, rows, cols)
    by_hand(trace, p, A, cols, layer, head, start, plain)
    url_state.sync()  # this fragment reruns alone: the link follows layer and head here


def window_caption(window: int, beyond: np.ndarray) -> str:
    """What the sliding window does to the drawn grid; beyond (W, C): cells outside the window."""
    text = (f"Layer of the sliding kind: each token reads only the last {window:,} positions, itself included "
            f"(query i reads keys i − {window - 1:,} … i). ")
    if T <= window:
        return text + f"The prompt has {T:,} tokens, so nothing is outside the window here."
    if beyond.any():
        first = int(np.flatnonzero(beyond.any(axis=1))[0]) + start
        return text + (f"From query ({first}) on, the first tokens drawn on the left are more than {window - 1:,} "
                       "positions back: their cells are yellow and their weight is exactly 0 %. The summed column "
                       "mixes tokens inside and outside the window; only those inside have weight.")
    return text + (f"The prompt has {T:,} tokens: the drawn queries' oldest keys fall into the summed column, "
                   "where the ones outside the window count 0 %.")


def shrunk(layer: int, head: int, window: int | None) -> None:
    """The whole T x T grid of one head, pooled into blocks: the sliding window's band shows at a glance."""
    pooled, hidden, starts = whole_prompt(run_key, tuple(ids), layer, head, window, p)
    b = int(starts[1] - starts[0]) if len(starts) > 1 else 1
    future = hidden & (starts[None, :] > starts[:, None])  # (n, n) blocks wholly after their queries
    outside = hidden & ~future  # wholly outside the sliding window
    ticks = [f"{s}–{min(s + b, T) - 1}" for s in starts]
    fig = go.Figure([go.Heatmap(**colour_axis(np.where(hidden, np.nan, pooled)), x=ticks, y=ticks, customdata=pooled,
                                hovertemplate="queries %{y}<br>keys %{x}<br>mean weight per query "
                                              "%{customdata:.2%}<extra></extra>", showscale=False),
                     go.Heatmap(z=np.where(future, 1.0, np.nan), x=ticks, y=ticks, showscale=False, hoverinfo="skip",
                                colorscale=[[0, "#e5e5e5"], [1, "#e5e5e5"]])])
    if outside.any():
        fig.add_trace(go.Heatmap(z=np.where(outside, 1.0, np.nan), x=ticks, y=ticks, showscale=False,
                                 colorscale=[[0, "#fcd34d"], [1, "#fcd34d"]], hovertemplate=(
                                     "queries %{y}<br>keys %{x}<br>outside the sliding window: 0 %<extra></extra>")))
    fig.update_layout(height=520, margin=dict(t=40, l=10, r=10, b=10),
                      title=f"the whole prompt, shrunk: blocks of {plural(b, 'position')}")
    fig.update_xaxes(title="keys (block of positions)", showticklabels=False)
    fig.update_yaxes(title="queries (block of positions)", showticklabels=False, autorange="reversed")
    with st.expander(f"The whole {T:,} × {T:,} grid of this head, shrunk", expanded=window is not None):
        st.plotly_chart(fig, width="stretch", key="at_shrunk")
        st.caption(f"Each cell is a block of {b} query positions × {b} key positions: the weight those queries put "
                   "on those keys, averaged over the queries, so every row still adds up to 100 %."
                   + (f" Yellow blocks lie {window:,} or more positions back from every query in them: a sliding "
                      "layer gives them exactly 0 %, so its weight stays in a band along the diagonal."
                      if outside.any() else " A full layer can reach back to the very first token."))


@fragment
def one_row(A: np.ndarray, cols: list, xlabels: list[str], sinks: int) -> None:
    """A: (W, C) this head's rows for queries start..T-1 over the drawn key columns."""
    st.subheader("One token's row")
    i = linked(st.selectbox, "at_row", integer(0, WIDE), "token that is looking", range(start, T),
               index=T - start - 1, format_func=plain.__getitem__)
    row = A[i - start]  # (C,) weights; zero after i
    shown = [k for k, c in enumerate(cols) if c is None or c <= i]
    fig = go.Figure(go.Bar(x=[xlabels[k] for k in shown], y=row[shown], marker_color="#2a6f97",
                           hovertemplate="%{x}<br>%{y:.1%}<extra></extra>"))
    fig.update_layout(height=360, margin=dict(t=20, b=10), yaxis_tickformat=".0%",
                      xaxis_title="key position (T), up to and including the token itself",
                      yaxis_title="attention weight", font=dict(size=13))
    token_axis(fig, "x", [xlabels[k] for k in shown], angle=-60, always=range(sinks + 1) if sinks else ())
    st.plotly_chart(fig, width="stretch", key="at_row_chart")
    best = np.argsort(-row[shown])[:3]
    st.markdown("Reads most from: " + ", ".join(
        f"{code_span(names[cols[shown[b]]]) if cols[shown[b]] is not None else 'the summed middle tokens'} "
        f"({row[shown[b]]:.0%})" for b in best))


@fragment
def heads() -> None:
    """The overview and the head picked below, one fragment: a new pick reruns both, never the whole page."""
    all_heads()
    one_head()


heads()
back_next()
