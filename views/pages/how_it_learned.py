"""How it learned: any text scored under teacher forcing, an answer scored after the question, one real
training step on a copy of the weights, and the memory a step needs."""
import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.stages.kv_cache import human_bytes, load_configs
from pipeline.text.pieces import token_pieces
from pipeline.training import memory
from pipeline.training.score import MAX_SCORE_CHARS, answer_ids, article_penalty, score_ids, text_ids
from pipeline.training.train_step import DEFAULT_LR, LR_RANGE, run_step, step_memory
from ui.chips import surprisal_chips
from ui.escape import axis_labels, markdown_text
from ui.metric_delta import metric_delta
from ui.plots import token_axis
from ui.words import plural, shortened
from views.chrome.frame import page_header
from views.chrome.navigation import back_next
from views.request.session import current_request
from views.server.state import APP_MAX_PROMPT_TOKENS, get_model, picked_model_key
from views.server.waiting import result_through_queue

SENTENCE = "The contract lasts three years."
OTHER = "Tomatoes are a fruit, botanically speaking."
ANSWER = "Yes. Botanically, tomatoes are fruit."
ARTICLE = (("Say it: one, two, three.", 0.54), ("A tricycle has three wheels.", 0.05))  # (sentence, the article's p)
TRAIN_STEP_COST = 4000  # queue units (~5 ms each): starting a process, loading a copy, one step
SHIFT_ROWS = 12  # rows of the shift-by-one table shown at most
READ_CHARS = 36  # characters of "the model read" that fit its column: the end of what was read
TRAIN_CHARS = 2000  # a sentence to learn: a step's activations grow with its length

page_header("How it learned", "A text is its own exercise sheet: at every position the next token is the answer "
            "to guess. The loss is how little probability the model gave that answer; training nudges every weight "
            "to give it more. Here the real model is scored on any text, and takes one real training step.")
lm = get_model()


def gib(n: float) -> str:
    return human_bytes(n, binary=True)


def scored(ids: list[int], start: int = 1):
    """The Score of ids (tokens from `start` on), computed once per server through the model's queue."""
    return result_through_queue(("score", tuple(ids), start), lambda: score_ids(get_model(), ids, start),
                                cost=len(ids), prompt_tokens=len(ids))


def labels_of(ids) -> list[str]:
    return [p.label for p in token_pieces(lm.tokenizer, list(ids))]


def mean_loss(logprobs: list[float]) -> float:
    return -sum(logprobs) / len(logprobs)


def token_table(score, labels: list[str]) -> pd.DataFrame:
    rows = []
    for t in score.scored:
        preferred = "" if score.ranks[t] == 1 else f"{labels_of([score.top_ids[t]])[0]} ({score.top_probs[t]:.1%})"
        rows.append({"#": t, "token": labels[t], "probability": f"{score.prob(t):.2%}", "rank": score.ranks[t],
                     "surprisal (bits)": round(score.surprisal_bits(t), 2),
                     "loss (nats)": round(-score.logprobs[t], 3), "model preferred": preferred})
    return pd.DataFrame(rows)


def show_score(score, labels: list[str]) -> None:
    c1, c2, c3 = st.columns(3)
    c1.metric("Tokens scored", f"{len(score.scored):,}")
    c2.metric("Mean loss", f"{score.mean_loss:.3f} nats", help="the mean of −ln p over the scored tokens")
    c3.metric("Perplexity", f"{score.perplexity:,.1f}",
              help="e^(mean loss): as unsure, on average, as a fair pick among this many tokens")
    shown = range(max(0, score.scored_from - 1), len(score.ids))  # after a prompt: its last token, then the answer
    bits = [score.surprisal_bits(t) if t >= score.scored_from else None for t in shown]
    titles = [f"#{t} · not scored" if b is None else
              f"#{t} · p {score.prob(t):.2%} · rank {score.ranks[t]:,} · {b:.2f} bits" for t, b in zip(shown, bits)]
    st.markdown(surprisal_chips([labels[t] for t in shown], [score.ids[t] for t in shown], bits, titles,
                                shown=240), unsafe_allow_html=True)
    st.caption("Green: the model expected the token (few bits of surprise); red: it did not (12 bits or more, about "
               "1 chance in 4,000). Grey: not scored. Hover a chip for its numbers.")
    st.dataframe(token_table(score, labels), hide_index=True, width="stretch")


def score_section() -> None:
    st.subheader("1. Score any text")
    st.markdown("One pass reads the whole text at once. The causal mask lets position *t* see only the tokens "
                "before it, so each position's output is a real guess of the token that follows: one text, every "
                "exercise, one pass (this is called *teacher forcing*).")
    with st.form("score_form"):
        text = st.text_area("Text to score", SENTENCE, max_chars=MAX_SCORE_CHARS, key="learn_text")
        st.form_submit_button("Score it")
    try:
        ids = text_ids(lm, text, APP_MAX_PROMPT_TOKENS)
        score = scored(ids)  # a long text is refused while the queue is long
    except InputError as e:
        st.error(str(e))
        return
    labels = labels_of(ids)
    show_score(score, labels)
    st.markdown("**Shift by one.** The same text read as the exercises it holds: each row is what the model read "
                "and the token it had to guess.")
    rows = [{"the model read": tail("".join(labels[:t]), READ_CHARS), "to guess": labels[t],
             "probability it gave": f"{score.prob(t):.2%}", "loss (nats)": round(-score.logprobs[t], 3)}
            for t in list(score.scored)[:SHIFT_ROWS]]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if len(score.scored) > SHIFT_ROWS:
        st.caption(f"The first {SHIFT_ROWS} of {len(score.scored):,} exercises.")


def tail(text: str, most: int) -> str:
    """The end of `text` (the words just before the guess), '…' in front when cut: a table cuts a long cell at its
    end, which hid exactly those words."""
    return text if len(text) <= most else "…" + text[-(most - 1):]


def article_section() -> None:
    st.subheader("2. The penalty for a low probability")
    st.markdown("The loss of one token is −ln p: the less probability the right answer got, the heavier the "
                "penalty. The article's example: \"three\" given 54 % costs 0.6, given 5 % costs 3.0. Below, the "
                "same formula on what this model really gave \"three\" in two sentences.")
    rows = []
    for sentence, p_article in ARTICLE:
        ids = text_ids(lm, sentence)
        score, labels = scored(ids), labels_of(ids)
        t = next((t for t in score.scored if "three" in labels[t]), None)
        if t is None:  # a tokenizer that spells "three" in pieces
            continue
        rows.append({"sentence": sentence, "article: p": f"{p_article:.0%}",
                     "article: −ln p": round(article_penalty(p_article), 2), "this model: p": f"{score.prob(t):.2%}",
                     "this model: −ln p": round(-score.logprobs[t], 2), "rank": score.ranks[t]})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def answer_section() -> None:
    st.subheader("3. Score my answer")
    try:
        request = current_request()
    except InputError as e:  # the sidebar's request is not valid: it says why there too
        st.error(str(e))
        return
    question = request.messages[-1][1]
    st.markdown(f"Paste the answer you expected to the sidebar's question (*{markdown_text(shortened(question))}*). "
                "It is placed after the question in the model's chat format, where the model's own answer would start, "
                "and each of its tokens is scored given everything before it.")
    with st.form("answer_form"):
        answer = st.text_area("Your answer", ANSWER, max_chars=MAX_SCORE_CHARS, key="learn_answer")
        st.form_submit_button("Score my answer")
    try:
        ids, start = answer_ids(lm, question, answer, request.prompt_format, APP_MAX_PROMPT_TOKENS)
        score = scored(ids, start)
    except InputError as e:
        st.error(str(e))
        return
    labels = labels_of(ids)
    show_score(score, labels)
    disagreed = [t for t in score.scored if score.ranks[t] > 1]
    if not disagreed:
        st.success("The model would have written every token of your answer itself (rank 1 everywhere).")
        return
    worst = max(disagreed, key=lambda t: -score.logprobs[t])
    preferred = labels_of([score.top_ids[worst]])[0]
    st.markdown(f"The model disagreed at {len(disagreed)} of {plural(len(score.scored), 'token')} (rank above 1). "
                f"Most of all "
                f"at **{markdown_text(labels[worst])}** (#{worst}): it gave your token {score.prob(worst):.2%} "
                f"(rank {score.ranks[worst]:,}) and preferred **{markdown_text(preferred)}** "
                f"({score.top_probs[worst]:.1%}).")


def parameter_count() -> int:
    return sum(p.numel() for p in lm.model.parameters())  # tied weights counted once


def training_section() -> None:
    st.subheader("4. One real training step")
    st.markdown("Backpropagation carries the loss back through every layer and gives each weight a gradient: how "
                "the loss changes when that weight moves. One optimizer step moves every weight a little against "
                "its gradient. The step runs on a **copy** of the weights in a separate process on the CPU, so the "
                "model every page and every other session uses is never changed; the copy is gone when the step ends.")
    with st.form("train_form"):
        c1, c2 = st.columns(2)
        train_text = c1.text_input("Sentence to learn", SENTENCE, max_chars=TRAIN_CHARS, key="learn_train_text")
        other_text = c2.text_input("An unrelated sentence (to see what else moves)", OTHER, max_chars=TRAIN_CHARS,
                                   key="learn_other_text")
        c1, c2 = st.columns(2)
        optimizer = c1.radio("Optimizer", ("sgd", "adam"), format_func=str.upper, horizontal=True,
                             key="learn_optimizer")
        lr = c2.number_input("Learning rate", min_value=LR_RANGE[0], max_value=LR_RANGE[1], value=DEFAULT_LR["sgd"],
                             format="%g", key="learn_lr",
                             help=f"SGD moves each weight by rate × gradient (try {DEFAULT_LR['sgd']:g}); Adam's "
                                  f"first step moves each by about the rate itself (try {DEFAULT_LR['adam']:g})")
        take = st.form_submit_button("Take one step")
    try:
        t_ids = text_ids(lm, train_text, APP_MAX_PROMPT_TOKENS)
        o_ids = text_ids(lm, other_text, APP_MAX_PROMPT_TOKENS)
    except InputError as e:
        st.error(str(e))
        return
    params = parameter_count()
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
    show_step(step, t_ids)


def show_step(step: dict, ids: list[int]) -> None:
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
    labels = labels_of(ids)
    x = axis_labels(labels[1:])  # unique labels, each numbered
    fig = go.Figure([go.Bar(x=x, y=[-v for v in before], name="before"),
                     go.Bar(x=x, y=[-v for v in after], name="after")])
    fig.update_layout(barmode="group", height=300, margin=dict(t=30, b=10), title="Loss per token (nats)",
                      yaxis_title="−ln p")
    token_axis(fig, "x", x)
    st.plotly_chart(fig, width="stretch")
    st.dataframe(pd.DataFrame([{"token": labels[t], "p before": f"{math.exp(b):.2%}", "p after": f"{math.exp(a):.2%}",
                                "change": f"{math.exp(a) - math.exp(b):+.2%}"}
                               for t, b, a in zip(range(1, len(ids)), before, after)]),
                 hide_index=True, width="stretch")
    norms = step["grad_norms"]
    fig = go.Figure(go.Bar(x=list(norms), y=list(norms.values())))
    fig.update_layout(height=280, margin=dict(t=30, b=10), yaxis_title="‖gradient‖",
                      title="Gradient norm per part of the model: where the change lands")
    st.plotly_chart(fig, width="stretch")


def memory_section() -> None:
    st.subheader("5. The memory a training step needs")
    st.markdown("Inference keeps the weights and the KV cache. Training also keeps a gradient per weight, the "
                "optimizer's state (Adam: two running averages per weight), and every layer's activations for the "
                "backward pass. Estimates by formula: ZeRO's 16 bytes per parameter for mixed-precision Adam "
                "(Rajbhandari et al. 2019); activations as in Korthikanti et al. 2022, 34 bytes per token, layer and "
                "unit of width in 16-bit.")
    configs = load_configs()
    c1, c2, c3 = st.columns(3)
    tokens = int(c1.number_input("Tokens per sequence", 1, 131_072, 2048, key="learn_mem_tokens"))
    precision = c2.selectbox("Weights", list(configs["weight_dtypes"]), index=1, key="learn_mem_dtype")
    optimizer = c3.radio("Optimizer ", ("adam", "sgd"), format_func=str.upper, horizontal=True, key="learn_mem_opt")
    wb = configs["weight_dtypes"][precision]
    d = lm.dims
    shapes = [(f"{lm.name} (loaded here)", parameter_count(), d.L, d.D, d.V, d.Hkv, d.Dh,
               [d.window(i) for i in range(d.L)])]
    shapes += [(name, int(m.params_b * 1e9), m.layers, m.heads * m.head_dim, None, m.kv_heads, m.head_dim,
                list(m.windows())) for name, m in configs["models"].items()]
    rows = []
    for name, p, L, D, V, Hkv, Dh, windows in shapes:
        train = memory.training_memory(p, L, D, tokens, V, wb, optimizer)
        held = [tokens if w is None else min(tokens, w) for w in windows]
        infer = memory.inference_memory(p, L, Hkv, Dh, tokens, V, wb, held)
        rows.append({"model": name, **{k: gib(v) for k, v in train.parts().items()},
                     "training step": gib(train.total), "inference": gib(infer.total),
                     "training ÷ inference": f"{train.total / infer.total:.1f}×"})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=35 * (len(rows) + 1) + 3,  # every row
                 column_config={"model": st.column_config.TextColumn(width=250)})  # the loaded model's name whole
    st.caption("One sequence, no activation recomputation. The public configurations list neither the model width "
               "nor the vocabulary: width is taken as heads × head width, and their logits are not counted. "
               "Inference: the weights, the KV cache of one sequence (sliding layers keep only their window, in the "
               "weights' precision) and one row of logits.")


score_section()
article_section()
answer_section()
training_section()
memory_section()
back_next()
