"""How it learned: any text scored under teacher forcing, an answer scored after the question, one real
training step on a copy of the weights, and the memory a step needs."""

import pandas as pd
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.text.pieces import token_pieces
from pipeline.training.score import MAX_SCORE_CHARS, answer_ids, article_penalty, score_ids, text_ids
from ui.chips import surprisal_chips
from ui.escape import markdown_text
from ui.words import plural, shortened
from views.chrome.frame import page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import text as link_text
from views.pages.how_it_learned.memory import memory_section
from views.pages.how_it_learned.training import training_section
from views.request.session import current_request
from views.server.state import APP_MAX_PROMPT_TOKENS, get_model
from views.server.waiting import result_through_queue

SENTENCE = "The contract lasts three years."
ANSWER = "Yes. Botanically, tomatoes are fruit."
ARTICLE = (("Say it: one, two, three.", 0.54), ("A tricycle has three wheels.", 0.05))  # (sentence, the article's p)
SHIFT_ROWS = 12  # rows of the shift-by-one table shown at most
READ_CHARS = 36  # characters of "the model read" that fit its column: the end of what was read

page_header("How it learned", "A text is its own exercise sheet: at every position the next token is the answer "
            "to guess. The loss is how little probability the model gave that answer; training nudges every weight "
            "to give it more. Here the real model is scored on any text, and takes one real training step.")
lm = get_model()


def scored(ids: list[int], start: int = 1):
    """The Score of ids (tokens from `start` on), computed once per server through the model's queue."""
    return result_through_queue(("score", tuple(ids), start), lambda: score_ids(get_model(), ids, start),
                                cost=len(ids), prompt_tokens=len(ids))


def labels_of(ids) -> list[str]:
    return [p.label for p in token_pieces(lm.tokenizer, list(ids))]


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
        text = linked(st.text_area, "learn_text", link_text(MAX_SCORE_CHARS), "Text to score", SENTENCE,
                      max_chars=MAX_SCORE_CHARS)
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
        answer = linked(st.text_area, "learn_answer", link_text(MAX_SCORE_CHARS), "Your answer", ANSWER,
                        max_chars=MAX_SCORE_CHARS)
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


score_section()
article_section()
answer_section()
training_section(lm, SENTENCE)
memory_section(lm)
back_next()
