"""How it learned, section 4: one real training step on a copy of the weights, in a child process behind the room's
questions (pipeline/training/train_step.py): the loss before and after, per token, and where the gradient lands."""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel
from pipeline.stages.kv_cache import human_bytes
from pipeline.text.pieces import token_pieces
from pipeline.training import memory
from pipeline.training.score import text_ids
from pipeline.training.train_step import DEFAULT_LR, LR_RANGE, run_step, step_memory
from ui.escape import axis_labels, markdown_text
from ui.metric_delta import metric_delta
from ui.plots import token_axis
from views.links.controls import linked
from views.links.params import choice, number
from views.links.params import text as link_text
from views.server.state import APP_MAX_PROMPT_TOKENS, picked_model_key
from views.server.waiting import result_through_queue

OTHER = "Tomatoes are a fruit, botanically speaking."
TRAIN_STEP_COST = 4000  # queue units (~5 ms each): starting a process, loading a copy, one step
TRAIN_CHARS = 2000  # a sentence to learn: a step's activations grow with its length


def gib(n: float) -> str:
    return human_bytes(n, binary=True)


def mean_loss(logprobs: list[float]) -> float:
    return -sum(logprobs) / len(logprobs)


def parameter_count(lm: LanguageModel) -> int:
    return sum(p.numel() for p in lm.model.parameters())  # tied weights counted once


def training_section(lm: LanguageModel, sentence: str) -> None:
    """The form (`sentence`: the text to learn at first), the memory the step needs, and the step once asked."""
    st.subheader("4. One real training step")
    st.markdown("Backpropagation carries the loss back through every layer and gives each weight a gradient: how "
                "the loss changes when that weight moves. One optimizer step moves every weight a little against "
                "its gradient. The step runs on a **copy** of the weights in a separate process on the CPU, so the "
                "model every page and every other session uses is never changed; the copy is gone when the step ends.")
    with st.form("train_form"):
        c1, c2 = st.columns(2)
        train_text = linked(c1.text_input, "learn_train_text", link_text(TRAIN_CHARS), "Sentence to learn", sentence,
                            max_chars=TRAIN_CHARS)
        other_text = linked(c2.text_input, "learn_other_text", link_text(TRAIN_CHARS),
                            "An unrelated sentence (to see what else moves)", OTHER, max_chars=TRAIN_CHARS)
        c1, c2 = st.columns(2)
        optimizer = linked(c1.radio, "learn_optimizer", choice(("sgd", "adam")), "Optimizer", ("sgd", "adam"),
                           format_func=str.upper, horizontal=True)
        lr = linked(c2.number_input, "learn_lr", number(*LR_RANGE), "Learning rate", min_value=LR_RANGE[0],
                    max_value=LR_RANGE[1], value=DEFAULT_LR["sgd"], format="%g",
                    help=f"SGD moves each weight by rate × gradient (try {DEFAULT_LR['sgd']:g}); Adam's "
                         f"first step moves each by about the rate itself (try {DEFAULT_LR['adam']:g})")
        take = st.form_submit_button("Take one step")
    try:
        t_ids = text_ids(lm, train_text, APP_MAX_PROMPT_TOKENS)
        o_ids = text_ids(lm, other_text, APP_MAX_PROMPT_TOKENS)
    except InputError as e:
        st.error(str(e))
        return
    params = parameter_count(lm)
    need = step_memory(params, lm.dims, max(len(t_ids), len(o_ids)), optimizer)
    available = memory.available_bytes()
    parts = ", ".join(f"{k} {gib(v)}" for k, v in need.parts().items())
    st.caption(f"This step needs about {gib(memory.child_bytes(need))} ({parts}, the process itself and the "
               "weights file it loads); "
               f"available now: {gib(available) if available else 'unknown'}. Too little, and it is refused.")
    model_key = picked_model_key()
    job = (model_key, tuple(t_ids), tuple(o_ids), optimizer, float(lr))
    if take:
        st.session_state["learn_job"] = job
    if st.session_state.get("learn_job") != job:
        st.info("Press **Take one step** to run it (it waits its turn in the model's queue).")
        return
    try:
        step = result_through_queue(("train step", *job[1:]), lambda: run_step(
            model_key, list(t_ids), list(o_ids), optimizer, float(lr), params, lm.dims), cost=TRAIN_STEP_COST)
    except InputError as e:
        st.error(str(e))
        return
    except RuntimeError as e:  # the child died (killed for memory, a broken weights cache): what it said
        st.error(f"The training step failed: {markdown_text(str(e))}")  # the child's words: untrusted text
        return
    show_step(step, [p.label for p in token_pieces(lm.tokenizer, t_ids)])


def show_step(step: dict, labels: list[str]) -> None:
    """labels: the learned sentence's tokens as text."""
    before, after = step["logprobs_before"], step["logprobs_after"]
    loss_after = mean_loss(after)
    other_before, other_after = mean_loss(step["other_before"]), mean_loss(step["other_after"])
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Loss before", f"{step['loss']:.3f}")
    c2.metric("Loss after one step", f"{loss_after:.3f}",
              **metric_delta(loss_after - step["loss"], "+.3f", lower_is_better=True))
    c3.metric("Unrelated sentence", f"{other_after:.3f}",
              **metric_delta(other_after - other_before, "+.3f", lower_is_better=True),
              help=f"its mean loss after the step; {other_before:.3f} before")
    c4.metric("Gradient norm", f"{step['grad_norm']:.2f}", help="√(sum of every weight's gradient squared)")
    st.caption(f"The whole step took {step['seconds']:.1f} s: starting the process and loading its copy "
               f"{step['load_s']:.1f} s, the backward pass and the update {step['step_s']:.1f} s, plus the passes "
               f"before and after. The process peaked at {gib(step['peak_rss_bytes'])} of memory (estimated "
               f"{gib(step['estimate_bytes'])}). A step with the same inputs is computed once per server.")
    x = axis_labels(labels[1:])  # unique labels, each numbered
    fig = go.Figure([go.Bar(x=x, y=[-v for v in before], name="before"),
                     go.Bar(x=x, y=[-v for v in after], name="after")])
    fig.update_layout(barmode="group", height=300, margin=dict(t=30, b=10), title="Loss per token (nats)",
                      yaxis_title="−ln p")
    token_axis(fig, "x", x)
    st.plotly_chart(fig, width="stretch")
    st.dataframe(pd.DataFrame([{"token": labels[t], "p before": f"{math.exp(b):.2%}", "p after": f"{math.exp(a):.2%}",
                                "change": f"{math.exp(a) - math.exp(b):+.2%}"}
                               for t, b, a in zip(range(1, len(labels)), before, after)]),
                 hide_index=True, width="stretch")
    norms = step["grad_norms"]
    fig = go.Figure(go.Bar(x=list(norms), y=list(norms.values())))
    fig.update_layout(height=280, margin=dict(t=30, b=10), yaxis_title="‖gradient‖",
                      title="Gradient norm per part of the model: where the change lands")
    st.plotly_chart(fig, width="stretch")
