"""Embeddings: each token id picks one row of a big table of numbers, its starting vector."""
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.stages import embeddings as es
from pipeline.text.pieces import token_pieces
from ui.escape import axis_labels, markdown_text, plotly_label
from ui.plots import TICK_FONT, token_axis
from views.chrome.frame import fragment, page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import WIDE, integer
from views.links.params import text as link_text
from views.request.runs import run_for_page
from views.request.typed_text import box_error, typed_text
from views.server.state import get_model

ROWS = 64  # token rows drawn at once: a 641-token prompt would otherwise make a 9,000 px tall heatmap
MAP_WORDS = 60  # words placed on the map at most
MAP_SAMPLE = ("tomato, apple, banana, cherry, carrot, potato, onion, king, queen, man, woman, Paris, London, France, "
              "red, green, blue, fruit, vegetable")

page_header("Embeddings", "The model cannot read text, only numbers. Its first step is a lookup: the table has one "
            "row per token in the vocabulary, and each token id picks its row, a list of D numbers. Training placed "
            "tokens used in similar ways at nearby rows, which you can explore below.")
trace = run_for_page()
lm = get_model()
V, D = trace.dims.V, trace.dims.D


@st.cache_resource(show_spinner="Preparing the embedding table...")
def embedding_table(model_name: str) -> tuple[np.ndarray, np.ndarray]:
    table = lm.model.get_input_embeddings().weight.detach().float().cpu().numpy()  # (V, D)
    return table, es.unit_rows(table)  # (V, D) each


table, unit = embedding_table(lm.name)

# --- the rows of this prompt --------------------------------------------------------------------------
st.subheader("The rows for your prompt")
E = trace.prefill.embeddings  # (T, D)
T = E.shape[0]
labels = axis_labels([q.label for q in token_pieces(lm.tokenizer, trace.ids)])  # '토 (1/3)' for part of a character
first = 0
if T > ROWS:
    first = linked(st.slider, "em_rows_start", integer(0, WIDE), f"first token row shown ({ROWS} rows at a time)", 0,
                   T - ROWS, T - ROWS, within=(0, T - ROWS),
                   help="The prompt is long: the heatmap shows a window of rows so it stays one screen tall.")
rows = slice(first, first + ROWS)
lim = float(np.quantile(np.abs(E), 0.99))
fig = go.Figure(go.Heatmap(z=E[rows], y=labels[rows], colorscale="RdBu", zmid=0, zmin=-lim, zmax=lim,
                           colorbar=dict(title="value", tickfont=TICK_FONT),
                           hovertemplate="token %{y}<br>dimension %{x}<br>value %{z:.3f}<extra></extra>"))
fig.update_layout(height=min(900, max(420, 14 * len(labels[rows]) + 140)), margin=dict(t=20, l=10, r=10, b=10),
                  font=dict(size=13))
fig.update_xaxes(title=f"dimension (D = {D})", tickfont=TICK_FONT)
token_axis(fig, "y", labels[rows], max_ticks=32, title="token position (T)", autorange="reversed")
st.plotly_chart(fig, width="stretch", key="em_heatmap")
if T > ROWS:
    st.caption(f"Rows {first}–{first + ROWS - 1} of the {T:,} tokens; move the slider for the others.")
st.caption(f"T × D = {E.shape[0]} × {E.shape[1]} numbers, copied from a table of V × D = {V:,} × {D} "
           f"({V * D:,} numbers). The same token always gets the same row, wherever it stands: position comes later "
           "(see Position). Blue = positive, red = negative.")


@fragment
def pca_map() -> None:
    st.subheader("A map of words")
    st.caption(f"Each word's row has D = {D} numbers; PCA finds the two directions along which these words differ "
               "most and draws them flat. Edit the list and watch the groups.")
    label = "words (comma or line separated)"
    text = typed_text(label, linked(st.text_area, "em_words", link_text(es.MAX_WORD_LIST_CHARS), label, MAP_SAMPLE,
                                    height=90, max_chars=es.MAX_WORD_LIST_CHARS), es.MAX_WORD_LIST_CHARS)
    try:
        words = es.parse_words(text)
        vecs = [es.word_vector(lm.tokenizer, table, w) for w in words[:MAP_WORDS]]
    except InputError as e:
        box_error(label, e)
        return
    if len(words) < 3:
        st.info("Give at least three words.")
        return
    if len(words) > MAP_WORDS:
        st.caption(f"The map shows the first {MAP_WORDS} of your {len(words):,} words.")
    coords, share = es.pca_2d(np.stack([w.vector for w in vecs]))  # (N, 2), (2,)
    split = [w for w in vecs if w.split]
    fig = go.Figure(go.Scatter(
        x=coords[:, 0], y=coords[:, 1], mode="markers+text", textfont=dict(size=14),
        text=[plotly_label(w.word + ("*" if w.split else "")) for w in vecs],
        textposition=es.label_positions(coords),  # neighbours' labels go to opposite sides
        marker=dict(size=9, color=["#e76f51" if w.split else "#2a9d8f" for w in vecs]),
        hovertext=[plotly_label(f"{w.word}: tokens {' | '.join(w.pieces)}") for w in vecs], hoverinfo="text"))
    fig.update_layout(height=520, margin=dict(t=20, b=10), font=dict(size=13),
                      xaxis_title=f"PCA direction 1 of D ({share[0]:.0%} of the spread)",
                      yaxis_title=f"PCA direction 2 of D ({share[1]:.0%} of the spread)")
    st.plotly_chart(fig, width="stretch", key="em_pca")
    if split:
        st.caption("* split into several tokens; the point is the mean of their rows: "
                   + markdown_text("; ".join(f"{w.word} = {' + '.join(w.pieces)}" for w in split)))


pca_map()


@fragment
def neighbours() -> None:
    st.subheader("Nearest neighbours")
    st.caption(f"Cosine similarity compares directions: 1 = same direction, 0 = unrelated. Searched over all "
               f"V = {V:,} rows.")
    word = typed_text("word", linked(st.text_input, "em_word", link_text(es.MAX_WORD_CHARS), "word", "tomato",
                                     max_chars=es.MAX_WORD_CHARS), es.MAX_WORD_CHARS)
    if not word.strip():
        return
    try:
        wv, top = es.neighbours(unit, lm.tokenizer, table, word, k=12)
    except InputError as e:
        box_error("word", e)
        return
    note = (f"“{word.strip()}” is {len(wv.ids)} tokens ({' + '.join(wv.pieces)}): using the mean of their rows."
            if wv.split else f"“{word.strip()}” is one token: {wv.pieces[0]} (id {wv.ids[0]}).")
    st.markdown(markdown_text(note))
    st.dataframe(pd.DataFrame(top).rename(columns={"text": "token"})[["token", "id", "cosine"]].round(3),
                 hide_index=True, width="stretch")


@fragment
def analogy() -> None:
    st.subheader("Analogy: a − b + c")
    st.caption("Take a's direction, remove b's, add c's, and look for the closest rows. The three input words "
               "are left out of the results in every spelling the vocabulary has (with or without a leading space, "
               "any capitals: “Paris”, “ paris”, …), since they would otherwise win. Whatever comes out is shown "
               "as is: this small model's table is not always as tidy as the textbook example.")
    a, b, cc = (typed_text(label, linked(col.text_input, key, link_text(es.MAX_WORD_CHARS), label, value,
                                         max_chars=es.MAX_WORD_CHARS), es.MAX_WORD_CHARS)
                for col, (label, value, key) in zip(st.columns(3), [("a", "king", "em_a"), ("− b", "man", "em_b"),
                                                                    ("+ c", "woman", "em_c")]))
    if not (a.strip() and b.strip() and cc.strip()):
        return
    try:
        inputs, top = es.analogy(unit, lm.tokenizer, table, a, b, cc, k=12)
    except InputError as e:
        box_error("a, b or c", e)
        return
    split = [w for w in inputs if w.split]
    if split:
        st.caption("Split into several tokens (mean used): " + markdown_text("; ".join(
            f"{w.word} = {' + '.join(w.pieces)}" for w in split)))
    st.dataframe(pd.DataFrame(top).rename(columns={"text": "token"})[["token", "id", "cosine"]].round(3),
                 hide_index=True, width="stretch")


left, right = st.columns(2)
with left:
    neighbours()
with right:
    analogy()
back_next()
