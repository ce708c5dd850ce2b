"""Faster decode: speculative decoding with drafts from the prompt (pipeline/faster/speculative/), the section
`speculative_section()`: per verify pass the drafts accepted and rejected, the acceptance rate and TPOT against
plain greedy decoding, interleaved (medians and ranges)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.costs.named_time import PLAIN, time_label
from pipeline.faster.speculative.measure import DEFAULT_DRAFTS, REPEATS, SpeculativeRun, measure
from pipeline.faster.speculative.rounds import MAX_DRAFTS
from pipeline.server.run_queue import cost_of
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.stages.tokens import tokenize_request
from ui.chips import chip, draft_rounds
from ui.escape import markdown_text
from ui.words import plural
from views.links.controls import linked
from views.links.params import choice, integer
from views.request.session import current_request, model_label, request_key
from views.server.measured import Dated, dated, measured_when
from views.server.state import APP_MAX_PROMPT_TOKENS, get_model
from views.server.waiting import result_through_queue, stored_result

EXAMPLE_TOKENS = 48  # answer tokens of the two examples
PASSAGE = ("The tomato is the edible berry of the plant Solanum lycopersicum, commonly known as the tomato plant. "
           "The species originated in western South America, Mexico, and Central America. Botanically it is a "
           "fruit, but it is eaten and cooked as a vegetable.")
EXAMPLES = {  # label -> question
    "Repeat a passage (drafting helps)": "Repeat this text exactly, word for word:\n\n" + PASSAGE,
    "A new answer (drafting barely helps)": "Write a short poem about the sea.",
}
YOURS = "Your request (the sidebar's)"
ROUNDS_SHOWN = 12  # verify passes drawn before the rest fold under "N more steps below"


def example_request(question: str) -> ChatRequest:
    request = ChatRequest.from_question(question, options=GenerationOptions(max_new_tokens=EXAMPLE_TOKENS))
    return replace(request, model=model_label(get_model().spec))


def measured_key(request: ChatRequest, k: int) -> tuple:
    return "speculative", request_key(request), k, REPEATS, "dated"


def measured(request: ChatRequest, k: int) -> Dated[SpeculativeRun]:
    """The request measured both ways on the picked model, once per server, through the queue; with when and where."""
    n_prompt = len(tokenize_request(get_model().tokenizer, request).ids)
    work = cost_of(n_prompt, request.options.max_new_tokens * (2 * REPEATS + 1))
    return result_through_queue(measured_key(request, k),
                                dated(lambda: measure(get_model(), request, k, REPEATS, APP_MAX_PROMPT_TOKENS)),
                                work, n_prompt)


def drafting_row(label: str, run: SpeculativeRun) -> dict:
    """What the drafts did: one of the two tables, each whole in the page's width (nine columns in one ran past
    its right edge and hid the plain path's TPOT and whether the tokens were the same)."""
    return {"request": label, "answer tokens": len(run.generated), "passes": run.passes,
            "drafts accepted": f"{run.accepted} of {run.drafted}",
            "acceptance": "—" if run.acceptance is None else f"{run.acceptance:.0%}",
            "tokens per pass": round(run.tokens_per_pass, 2)}


def timing_row(label: str, run: SpeculativeRun) -> dict:
    """What it bought: TPOT both ways (median, range) and whether the answers were the same."""
    t = run.timing
    ms = lambda r: f"{r[0] * 1e3:.1f}–{r[1] * 1e3:.1f}"  # noqa: E731
    return {"request": label, "TPOT speculative (ms)": f"{t.a_median * 1e3:.1f} ({ms(t.a_range)})",
            f"{time_label('TPOT', PLAIN)} (ms)": f"{t.b_median * 1e3:.1f} ({ms(t.b_range)})",
            "same tokens": "yes" if run.same_tokens else "NO"}


def rounds_html(run: SpeculativeRun) -> str:
    text = run.token_texts
    rows = [(r.step, (text[r.token], r.token), [(text[d], d) for d in r.drafts[:r.accepted]],
             [(text[d], d) for d in r.rejected]) for r in run.rounds if r.drafts]
    return draft_rounds(rows, shown=ROUNDS_SHOWN)


def speculative_section() -> None:
    st.subheader("More tokens per read: speculative decoding")
    st.markdown(
        "A decode step reads every weight of the model to produce one token, and on this machine that read is "
        "most of the step's time. Reading the weights once for several tokens costs little more than for one: "
        "that is what a prefill does. Speculative decoding uses this. It guesses the next few tokens (the "
        "*drafts*), then runs the token it has plus all the drafts through the full model in **one pass**. That "
        "pass gives the model's own choice after each of them. The drafts are kept up to the first one the model "
        "would not have chosen; the rest are thrown away, and the KV cache forgets their positions. The model's "
        "own choice at that point comes for free, so every pass yields at least one token.\n\n"
        "The guesses here need no second model: they are looked up in the text so far (*prompt lookup*). Take the "
        "last few tokens, find where they appeared before, and propose what followed there. When the answer "
        "repeats or quotes the prompt, these guesses are often right. When it says something new, they are "
        "mostly wrong, and the pass is a normal decode step with a few extra positions. Either way, the answer is "
        "greedy decoding's, token for token: only the number of passes changes.")
    k = linked(st.slider, "fd_drafts", integer(1, MAX_DRAFTS), "Drafts checked per pass", 1, MAX_DRAFTS, DEFAULT_DRAFTS)
    picked = linked(st.radio, "fd_request", choice([*EXAMPLES, YOURS]), "Request", [*EXAMPLES, YOURS], horizontal=True)
    examples = {label: example_request(q) for label, q in EXAMPLES.items()}
    if st.button("⏱ Measure speculative decoding now", key="fd_spec_measure"):
        st.session_state["fd_spec_measured"] = True
    if not (st.session_state.get("fd_spec_measured")
            or all(stored_result(measured_key(r, k)) is not None for r in examples.values())):
        runs_each = 2 * REPEATS + 1
        st.info(f"**Measure now** decodes each example {runs_each} times ({EXAMPLE_TOKENS} tokens each: "
                f"speculative and plain taking turns, then once to compare the tokens) on "
                f"{markdown_text(get_model().name)}. It takes a while on a CPU and the room's other requests "
                "wait behind it, so it runs when asked; once measured, it shows here for everyone.")
        return
    try:
        kept = {label: measured(request, k) for label, request in examples.items()}
        if picked == YOURS:
            kept[YOURS] = measured(current_request(), k)
    except InputError as e:
        st.error(f"Please fix the request — {markdown_text(e)}")
        return
    runs = {label: d.value for label, d in kept.items()}
    st.dataframe(pd.DataFrame([drafting_row(label, run) for label, run in runs.items()]), hide_index=True)
    st.dataframe(pd.DataFrame([timing_row(label, run) for label, run in runs.items()]), hide_index=True)
    st.caption(f"TPOT: time per output token after the first, median of {plural(REPEATS, 'run')} each way, interleaved "
               "(speculative, plain, speculative, ...), range in brackets. Plain: the same plain serving path, one "
               "token per pass. Greedy decoding; the answers are compared token for token on every run. Measured "
               + "; ".join(f"{markdown_text(label)} {measured_when(d.at, d.host)}" for label, d in kept.items())
               + ", each once for everyone here: the times are of that moment's load.")
    run = runs[picked]
    st.markdown(f"**{markdown_text(picked)}**: {markdown_text(run.timing.verdict('speculative decoding', 'plain'))}.")
    if run.acceptance is not None and run.acceptance < 0.2:
        st.markdown("Few drafts were right, so a pass brings about one token, as in plain decoding; the extra "
                    "positions in each pass are what speculation costs here.")
    st.markdown("Each line is one pass: the token fed (grey), then its drafts, accepted (green) or rejected (red). "
                "Passes with nothing to look up (plain decode steps) are left out.")
    st.markdown(chip("fed", None, "template") + chip("accepted", None, "accepted") + chip("rejected", None, "rejected"),
                unsafe_allow_html=True)
    if any(r.drafts for r in run.rounds):
        st.markdown(rounds_html(run), unsafe_allow_html=True)
    else:
        st.info("Nothing in this request could be looked up: every pass was a plain decode step.")
    st.markdown(f"The answer ({plural(len(run.generated), 'token')}, finish reason "
                f"{markdown_text(run.finish_reason)}):")
    st.code(run.text or "(empty)", language=None, wrap_lines=True)
