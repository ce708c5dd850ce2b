"""Compare models: the sidebar's request through both models side by side (pipeline/run/compare_models.py)."""
import time
from dataclasses import replace

import pandas as pd
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.core.timing import Comparison
from pipeline.costs.named_time import PATH_NAMES, PLAIN, time_label
from pipeline.costs.verdicts import summary
from pipeline.run.compare_models import answers_sentence, compare_models_steps
from pipeline.stages.kv_cache import human_bytes
from pipeline.stages.tokens import tokenize_request
from pipeline.text.pieces import token_pieces
from pipeline.text.unfinished import candidate_label
from ui.chips import token_chips
from ui.escape import markdown_text
from ui.words import plural
from views.chrome.frame import end_page, page_header, stage_link
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import choice
from views.request.model_pair import compared_keys, model_handle
from views.request.session import current_request, request_key
from views.server.long_job import long_job, made_line, stopped_here
from views.server.state import APP_MAX_PROMPT_TOKENS
from views.server.verdict_log import history_lines, kept

REPEATS = 3  # timed runs per model, interleaved
CHIPS_SHOWN = 160  # chips drawn in a half-width column; a longer prompt folds the rest under "N more below"
TEXT_LINES, TEXT_CHARS = 12, 600  # a longer prompt or answer shows its start, the rest folded under a cue


def text_box(text: str) -> None:
    """`text` shown literally (a code block escapes everything). A long one shows its first whole lines (or words),
    and the rest under a cue that counts it: a scrolling box cut its text mid-line with nothing to say there was
    more."""
    head, rest = text_head(text)
    st.code(head, language=None, wrap_lines=True)
    if rest:
        lines = rest.rstrip("\n").count("\n") + 1  # a text ending in a line break has no line after it
        with st.expander(f"{plural(lines, 'more line')} below ({len(rest):,} characters)"):
            st.code(rest, language=None, wrap_lines=True)


def text_head(text: str) -> tuple[str, str]:
    """(what shows at once, the rest): at most TEXT_LINES lines and about TEXT_CHARS characters, cut at a line's end,
    else at a space; ('' rest when it all fits). The rest starts on the line or word after the cut."""
    lines = text.split("\n")
    head = "\n".join(lines[:TEXT_LINES])
    if len(head) > TEXT_CHARS:
        end = head.rfind("\n", 0, TEXT_CHARS)
        end = end if end > 0 else head.rfind(" ", 0, TEXT_CHARS)
        head = head[:end] if end > 0 else head[:TEXT_CHARS]
    rest = text[len(head):]
    return (head, rest.removeprefix("\n")) if rest.strip() else (text, "")


page_header("Compare models", "The same request through two different models: how each one writes it down, "
                              "cuts it into tokens, answers it, and what it costs in memory and time.")
keys = compared_keys()
try:
    handles = [model_handle(k) for k in keys]
except InputError as e:  # the other model's files cannot be read or converted here (a read-only or full folder)
    st.info(f"The other model is not available on this server: {markdown_text(str(e))}")
    end_page()
formats = {"chat": "each model's chat format", "plain": "plain text (no turn markers)"}
prompt_format = linked(st.radio, "cmp_format", choice(list(formats)), "How the request is written", list(formats),
                       format_func=formats.get, horizontal=True)
try:
    request = replace(current_request(), prompt_format=prompt_format)
    for h in handles:  # a request a model cannot write down is refused here, before anything is queued
        tokenize_request(h.tokenizer, request)
except InputError as e:
    st.error(f"Please fix the request — {markdown_text(e)}")
    end_page()

question = ("compare_models", keys, request_key(request), prompt_format)
if st.session_state.get("cmp_again"):  # the button below was pressed: a new measurement, under a key of its own
    st.session_state.setdefault("cmp_measured_again", {})[question] = ("again", time.time())
job = question + st.session_state.get("cmp_measured_again", {}).get(question, ())
again = stopped_here(job) and st.button("Compare them", key="cmp_start")  # after this session cancelled it
try:
    finished = long_job(job, lambda: compare_models_steps(request, handles, REPEATS, APP_MAX_PROMPT_TOKENS),
                        "the comparison of the two models", start=again or not stopped_here(job))
except InputError as e:
    st.error(f"Please fix the request — {markdown_text(e)}")
    end_page()
if finished is None:  # running (its progress is drawn above), or stopped
    end_page()
result = finished.value
st.caption(f"Each model's run and the timing below: {made_line(finished)}")
a, b = result.runs

st.subheader("1. The answers")
st.markdown(markdown_text(answers_sentence(result)))
for col, run in zip(st.columns(2), result.runs):
    with col:
        tuned = {True: "instruct", False: "base (pretrained only)"}.get(run.instruct, "tuning not known")
        st.markdown(f"**{markdown_text(run.display_name)}** · {tuned}")
        text_box(run.answer or "(empty)")
        st.caption(f"{plural(run.answer_tokens, 'token')}, finish reason {markdown_text(run.finish_reason)} "
                   f"(greedy unless the sidebar says otherwise).")

st.subheader("2. The prompt each model reads")
st.markdown("Each model has its own way of writing down a chat, and its own vocabulary to cut it with. The "
            "same request becomes a different text and a different number of tokens.")
for col, run, handle in zip(st.columns(2), result.runs, handles):
    with col:
        st.markdown(f"**{markdown_text(run.display_name)}: {plural(run.template_tokens, 'token')}**")
        text_box(run.template_text)
        st.markdown(token_chips(list(run.tokens), pieces=token_pieces(handle.tokenizer, run.ids),
                                shown=CHIPS_SHOWN), unsafe_allow_html=True)

st.subheader("3. The first token's top candidates")
st.markdown("What each model thought most likely right after the prompt, before anything was chosen "
            "(probabilities over its whole vocabulary).")
for col, run, handle in zip(st.columns(2), result.runs, handles):  # each token named as Journey names it
    col.markdown(f"**{markdown_text(run.display_name)}**")
    col.dataframe(pd.DataFrame([{"token": candidate_label(handle.tokenizer, run.ids, c.token_id, run.answer_ids),
                                 "id": c.token_id, "probability": f"{c.prob:.1%}"}
                                for c in run.first_candidates]), hide_index=True, width="stretch")
st.caption("␣ is a space. A token that is only part of a character is named as on Journey: the one chosen by the "
           "character the answer goes on to spell (`토 (1/3)`: the first of its three bytes), any other by what it "
           "would start (`<0xEC> (byte 1 of 3)`).")


def _layers(run) -> str:
    kinds = run.attention
    if not kinds.sliding_layers:
        return f"all {kinds.full_layers} full"
    return f"{kinds.sliding_layers} sliding (window {kinds.window:,}), {kinds.full_layers} full"


st.subheader("4. Shape, attention and KV cache")
rows = {}
for run in result.runs:
    d, kinds, kv = run.dims, run.attention, run.kv
    rows[run.display_name] = {
        "parameters": f"{run.parameters / 1e6:,.0f}M ({run.embedding_parameters / 1e6:,.0f}M embedding)",
        "vocabulary": f"{d.V:,}",
        "layers × width": f"{d.L} × {d.D}",
        "attention layers": _layers(run),
        "query heads : K/V heads": f"{kinds.H} : {kinds.Hkv} ({kinds.sharing})",
        "KV bytes per token, one layer": f"{kv.per_layer_bytes[0]:,} B (2 × {d.Hkv} × {d.Dh} × {d.bytes_per_value} B)",
        "… read from the real cache": ", ".join(sorted({f"{m:,.0f} B" for m in kv.measured_per_layer_bytes})),
        "KV bytes per token, all layers": f"{human_bytes(kv.per_token_bytes)} (× {d.L} layers)",
        "… once the windows are full": human_bytes(kv.long_run_per_token_bytes),
        "KV cache for 8,000 tokens": human_bytes(kv.bytes_at(8000)),
    }
st.dataframe(pd.DataFrame(rows), width="stretch")
st.caption("Parameters: the embedding table's share in brackets. A full layer attends to every earlier token, a "
           "sliding one to its last `window` positions. Query heads : K/V heads: H / Hkv query heads share each K/V "
           "head (multi-query: one K/V head for all; multi-head: one each). K and V are stored for every layer and "
           "every K/V head. The figure read from the real cache is each layer's tensor bytes after this prompt, "
           "divided by the positions that layer holds. A sliding-window layer keeps only its last window of "
           "positions, so past it only the full layers grow.")


def _timing_row(name: str, c: Comparison) -> dict:
    """One time, a column per model: 'median (range)' (five columns, two headers per model, ran past the page)."""
    return {"": name,
            a.display_name: f"{c.a_median * 1e3:,.0f} ms ({c.a_range[0] * 1e3:,.0f}–{c.a_range[1] * 1e3:,.0f})",
            b.display_name: f"{c.b_median * 1e3:,.0f} ms ({c.b_range[0] * 1e3:,.0f}–{c.b_range[1] * 1e3:,.0f})"}


st.subheader("5. Time to first token and per token")
timing = result.timing
if timing is None:
    st.info("Not timed.")
else:
    path = PATH_NAMES[PLAIN]
    st.markdown(f"Measured on the {path} (no captures: faster than the captured run other pages show), the two "
                f"models taking turns, {REPEATS} runs each (medians and ranges): TTFT is the prompt's pass and the "
                "first choice, TPOT the time of each further token. Each cell: the median, the range in brackets.")
    named = [(time_label(q, PLAIN), q, c) for q, c in (("TTFT", timing.ttft), ("TPOT", timing.tpot)) if c]
    st.dataframe(pd.DataFrame([_timing_row(name, c) for name, _, c in named]), hide_index=True, width="stretch")
    lines = []
    for name, q, c in named:  # every measurement of this question on this server, kept and dated
        history = kept(question + (q,), c, finished.made_at)
        lines.append(f"- **{name}**: {markdown_text(summary(history, a.display_name, b.display_name))}"
                     + (f"\n{history_lines(history, a.display_name, b.display_name)}" if len(history) > 1 else ""))
    st.markdown("\n".join(lines))
    if timing.work_differs:
        st.markdown("**The two do different work**, so a speed gap is not a verdict on the models alone:\n"
                    + "\n".join(f"- {markdown_text(w)}" for w in timing.work_differs))
    st.button("Measure the speed again", key="cmp_again",  # read at the top of the page, before the job is asked
              help="A new interleaved measurement, kept beside the earlier ones (never in their place).")
    st.caption("A shared machine's load changes from minute to minute: each measurement is kept with its time, for "
               "everyone (a restart keeps them), and the verdict above is what all of them agree on.")

stage_link("views/pages/tokens.py", "The same text in both vocabularies: Tokens", "🔤")
back_next()
