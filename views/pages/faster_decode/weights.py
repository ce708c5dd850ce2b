"""Faster decode, "Fewer bytes per token": the weight formats measured against fp32 (bytes, TPOT, quality),
and the KV cache in 8 bits (its bytes and the attention output's error). Drawn by views/pages/faster_decode/page.py."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.costs.named_time import PLAIN, time_label
from pipeline.faster.formats import bf16_advice
from pipeline.model.kv_int8 import attention_error
from pipeline.model.weight_formats import FORMAT_NOTES, NOT_BUILT, WEIGHT_FORMATS
from pipeline.stages.kv_cache import human_bytes
from ui.escape import markdown_text
from ui.words import plural
from views.server.measured import Dated, dated, measured_when
from views.server.state import get_model
from views.server.waiting import result_through_queue

KV_POSITIONS = 512  # the attention error is measured over at most the prompt's first 512 positions (T x T scores)
STEPS, REPEATS = 16, 3
PROMPTS = None  # the quality prompts: pipeline.faster.formats.QUALITY_PROMPTS (a test gives fewer)


def measure_now(question: str) -> Dated:
    """Every format of the picked model measured now, through the queue (stored: once per server), with when and
    where it was measured."""
    from pipeline.faster.formats import measure_formats
    from pipeline.stages.request import ChatRequest

    def compute():
        models = {w: get_model(weights=w) for w in WEIGHT_FORMATS}  # a converted copy is made on first use
        return measure_formats(models, ChatRequest.from_question(question), STEPS, REPEATS, PROMPTS)
    return result_through_queue(("weight formats", question, STEPS, REPEATS, "dated"), dated(compute), cost=40_000)


def greedy_verdict(row) -> str:
    """How a format's greedy answer compares with fp32's: 'the same' or 'leaves fp32's at token 7'."""
    return "the same" if row.same_greedy else f"leaves fp32's at token {row.first_difference}"


def formats_tables(report) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(speed, quality): two tables of one row per format, each narrow enough to show whole in the page's
    column (one table of ten columns ran past its right edge and hid the greedy answers' verdicts)."""
    speed, quality = [], []
    for w, row in report.rows.items():
        t = report.tpot[w]
        vs = report.vs_fp32.get(w)
        speed.append({
            "weights": w, "held": human_bytes(row.parameter_bytes), "read per token": human_bytes(row.bytes_per_token),
            f"{time_label('TPOT', PLAIN)}, median (ms)": round(t.median * 1e3, 1),
            "TPOT range (ms)": f"{t.low * 1e3:.1f}–{t.high * 1e3:.1f}",
            "vs fp32": "—" if vs is None else (vs.speed() if vs.separated else "ranges overlap"),
        })
        quality.append({
            "weights": w, "KL vs fp32 (nats, mean)": f"{row.kl_mean:.2e}", "KL max": f"{row.kl_max:.2e}",
            "top-1 same": f"{row.top1_agreement:.1%}", "greedy answer": greedy_verdict(row),
        })
    return pd.DataFrame(speed), pd.DataFrame(quality)


def weight_formats_section() -> None:
    """The section on the page: the formats measured on a button, and the 8-bit KV cache on the page's run."""
    from views.request.runs import run_for_page

    lm, trace = get_model(), run_for_page(original=True)
    st.subheader("Fewer bytes per token")
    st.markdown(
        "A decode step moves one token forward, yet it reads every weight of the model once. On a CPU that read is "
        "most of the step's time, so a weight stored in fewer bytes is read sooner. Three formats are built here "
        "(pick one in the sidebar under **Weights**; every page then computes in it):")
    st.markdown("\n".join(f"- **{w}**: {FORMAT_NOTES[w]}" for w in WEIGHT_FORMATS))
    st.caption(f"Not built: int4 — {NOT_BUILT['int4']}. The vocabulary projection stays in float32 under int8: "
               "quantizing it too cut the bytes read per token further but changed the greedy answer of the default "
               "model (measured: its answer left fp32's at the 14th token).")
    st.markdown(f"**Measure now** runs {markdown_text(lm.name)} in each format on the plain serving path: "
                f"{STEPS} tokens, {REPEATS} rounds with the formats taking turns, medians and ranges. Quality is "
                "the next-token distribution at every position of five prompts against fp32's.")
    if st.button("⏱ Measure the formats now", key="fd_measure"):
        st.session_state["fd_measured"] = True
    if st.session_state.get("fd_measured"):
        try:
            measured = measure_now(trace.request.messages[-1][1])
        except InputError as e:
            st.warning(markdown_text(e))
        else:
            report = measured.value
            speed, quality = formats_tables(report)
            st.dataframe(speed, hide_index=True, width="stretch")
            st.dataframe(quality, hide_index=True, width="stretch")
            st.markdown(bf16_advice(report))  # the room's advice from this machine's measurement (our text, numbers)
            with st.expander("The greedy answers: each stops at a fixed length, so it may end mid-sentence"):
                for w, row in report.rows.items():
                    st.markdown(f"**{w}** ({plural(len(row.greedy_ids), 'token')}): {greedy_verdict(row)}")
                    st.code(row.greedy_text, language=None, wrap_lines=True)
            st.caption(f"Measured {measured_when(measured.at, measured.host)}, once for everyone here: a machine's "
                       "load changes from minute to minute, so the times are of that moment. KL: how far a format's "
                       "next-token probabilities are from fp32's (0 = the same). 'ranges overlap': the machine's noise "
                       "is larger than the gap, so no ratio is given.")
    kv_section(trace)


def kv_section(trace) -> None:
    st.markdown("**The KV cache in 8 bits.** Each key and value vector (one head, one position) is stored as "
                "int8 with one float32 scale (its largest number / 127). Below: this run's prompt with its keys "
                "and values rounded that way, attention computed again, against the float32 cache.")
    p, d = trace.prefill, trace.dims
    n = min(len(trace.ids), KV_POSITIONS)
    error = attention_error(p.q_rot[:, :, :n], p.k_rot[:, :, :n], p.v[:, :, :n], d)
    c1, c2, c3 = st.columns(3)
    c1.metric(f"KV cache of {n:,} positions, float32", human_bytes(error.bytes_fp32))
    c2.metric("bf16", human_bytes(error.bytes_bf16))
    c3.metric("int8 + scales", human_bytes(error.bytes_int8))
    worst = max(range(d.L), key=lambda i: error.relative[i])
    st.markdown(f"Attention output's error with the int8 cache: {max(error.relative):.2%} of its size in the "
                f"worst layer ({worst}), {sum(error.relative) / d.L:.2%} on average over the {d.L} layers; the "
                f"stored numbers themselves are off by {error.kv_rel:.2%}.")
    st.caption("The scores use Dh^-0.5 as the softmax scale on both sides; sliding layers see their window.")
