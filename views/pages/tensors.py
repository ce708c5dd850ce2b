"""Tensors & batch: token ids padded into one rectangle with positions and a mask, as a GPU server does."""
import json

import pandas as pd
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.stages.batch import batch_tensors, decode_step_tensors, describe, pad_token_text, padding_share
from pipeline.stages.request import ChatRequest
from pipeline.stages.tokens import tokenize_request
from ui.escape import code_span, json_text
from views.chrome.frame import end_page, page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import WIDE, choice, integer, text
from views.request.runs import run_for_page
from views.request.typed_text import box_error, typed_text
from views.server.state import get_model

page_header("Tensors & batch", "A GPU works on rectangles of numbers (tensors). Requests of different lengths are "
                               "padded to the same length so several can be computed in one go.")
lm = get_model()
trace = run_for_page()
PAD_BG = "background-color:#fee2e2;color:#991b1b"
COLUMNS = 64  # token columns drawn at once: every cell of a table is styled on the server (9 s a 3 × 3,500 table)
QUESTION_CHARS = 1_000  # the other users' questions


@st.cache_data(max_entries=64, show_spinner=False)
def prompt_ids(question: str) -> list[int]:
    return tokenize_request(get_model().tokenizer, ChatRequest.from_question(question)).ids


def compact(value, keep: int = 8) -> str:
    """JSON of a value; a long (1, n) row is cut in the middle so it stays one line:
    [[1, 1, ..., 1]] of 644 ones -> '[[1, 1, 1, 1, 1, 1, 1, 1, … 634 more …, 1, 1]] (644 values)'."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list) and len(value[0]) > keep + 4:
        row = value[0]
        show = lambda xs: ", ".join(map(str, xs))  # noqa: E731
        return f"[[{show(row[:keep])}, … {len(row) - keep - 2:,} more …, {show(row[-2:])}]] ({len(row):,} values)"
    return json.dumps(value)


def grid(values: list[list[int]], mask: list[list[int]], names: list[str],
         columns: slice) -> "pd.io.formats.style.Styler":
    """The `columns` of (B, T) values as a table, headed by their positions; padding cells tinted red."""
    df = pd.DataFrame([row[columns] for row in values], index=names,
                      columns=[str(c) for c in range(len(values[0]))[columns]])
    pad = pd.DataFrame([[PAD_BG if m == 0 else "" for m in row[columns]] for row in mask], index=df.index,
                       columns=df.columns)
    return df.style.apply(lambda _: pad, axis=None)


def column_window(T: int, key: str) -> slice:
    """The token columns the tables show: all of them, or COLUMNS of a long prompt's from a slider."""
    if T <= COLUMNS:
        return slice(0, T)
    first = linked(st.slider, key, integer(0, WIDE), f"first token column shown ({COLUMNS} at a time)", 0,
                   T - COLUMNS, 0, within=(0, T - COLUMNS),
                   help="The prompt is long: the tables show a window of columns so they stay quick to draw.")
    st.caption(f"Columns {first}–{first + COLUMNS - 1} of the {T:,}; move the slider for the others.")
    return slice(first, first + COLUMNS)


st.subheader("1. Your request alone")
st.markdown(f"One request is a batch of size B = 1. Its {len(trace.tokens)} token ids become `input_ids`; "
            "`position_ids` count 0, 1, 2, … so the model knows the order; `attention_mask` is 1 for every "
            "real token.")
single = trace.batch["single"]
st.dataframe(pd.DataFrame([{"tensor": k, "shape (B, T)": str(tuple(v["shape"])), "dtype": v["dtype"]}
                           for k, v in single.items()]), hide_index=True)
columns = column_window(len(single["input_ids"]["values"][0]), "batch_single_from")
for name, v in single.items():
    st.markdown(f"`{name}`")
    st.dataframe(grid(v["values"], single["attention_mask"]["values"], ["request 0"], columns), width="stretch")

st.subheader("2. A batch of three requests")
st.markdown("Two other users' questions share the GPU with yours. Shorter prompts are filled with a padding token "
            "(red cells) so all rows have the same length T. The mask tells the model to ignore padding, and "
            "each row counts its own positions from 0 at its first real token.")
c1, c2, c3 = st.columns([2, 2, 1])
others = {label: typed_text(label, linked(col.text_input, key, text(QUESTION_CHARS), label, value,
                                          max_chars=QUESTION_CHARS), QUESTION_CHARS)
          for col, label, value, key in [(c1, "Second user's question", "Hi!", "batch_q2"),
                                         (c2, "Third user's question",
                                          "Write a short poem about a tomato growing in the sun.", "batch_q3")]}
side = linked(c3.radio, "batch_side", choice(["left", "right"]), "Padding side", ["left", "right"],
              help="Left padding keeps every request's last real token in the last column, where the next token "
                   "is read during generation.")
seqs = [trace.ids]
for label, question in others.items():
    try:
        seqs += [prompt_ids(question)] if question.strip() else []
    except InputError as e:
        box_error(label, e)
        end_page()
names = ["request 0 (yours)"] + [f"request {i}" for i in range(1, len(seqs))]
tensors = describe(batch_tensors(seqs, lm.tokenizer.pad_token_id, left_pad=(side == "left")))
pad_piece = pad_token_text(lm.tokenizer)
st.markdown(f"Padding token id **{lm.tokenizer.pad_token_id}** ({code_span(pad_piece)}). Prompt lengths: "
            + ", ".join(f"{n}: **{len(s)}**" for n, s in zip(names, seqs)) + ".")
st.dataframe(pd.DataFrame([{"tensor": k, "shape (B, T)": str(tuple(v["shape"])), "dtype": v["dtype"],
                            "padding cells": sum(r.count(0) for r in tensors["attention_mask"]["values"])}
                           for k, v in tensors.items()]), hide_index=True)
mask = tensors["attention_mask"]["values"]
columns = column_window(len(mask[0]), "batch_from")
tabs = st.tabs(list(tensors))
for tab, (name, v) in zip(tabs, tensors.items()):
    with tab:
        st.dataframe(grid(v["values"], mask, names, columns), width="stretch")
padding, total = padding_share(seqs)
st.caption(f"{padding} of {total} cells ({padding / total:.0%}) are padding: work the GPU does for "
           "nothing. Real servers reduce this by packing requests or batching them continuously.")

st.subheader("3. The batch entry and the next decode step")
c1, c2 = st.columns(2)
c1.markdown("The scheduler's record for your request:")
c1.code(json_text({"batch": [trace.batch["entry"]]}), language="json", wrap_lines=True)
if trace.steps:
    T = len(trace.tokens)
    first = trace.steps[0]
    c2.markdown("After prefill only the newly chosen token is fed in; the cache supplies the rest:")
    step = decode_step_tensors(T, first.token_id)
    c2.code("\n".join(f"{k}: {compact(v)}" for k, v in step.items()), language="yaml", wrap_lines=True)
    c2.caption(f"One new token, but the mask has {T + 1} ones: the {T} cached positions plus the new one.")
back_next()
