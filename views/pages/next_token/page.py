"""Next token: from the stored scores (logits) to one chosen token. Never runs the model again."""
from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.stages.next_token import (
    TIE_RULE,
    answer_confidence,
    candidates,
    draw,
    empirical,
    filter_stages,
    softmax,
)
from pipeline.stages.request import option_ranges
from pipeline.text.pieces import token_pieces
from pipeline.text.readable import render_bytes
from pipeline.text.unfinished import continuation_label
from ui.escape import code_span, plotly_label
from ui.plots import TICK_FONT, token_axis
from ui.words import plural
from views.chrome.frame import fragment, page_header
from views.chrome.navigation import back_next
from views.links import url_state
from views.links.controls import declare, linked
from views.links.params import choice, integer, option
from views.pages.next_token.constrained import constrained
from views.request.model_kind_note import base_model_note
from views.request.runs import run_for_page
from views.request.slider_args import slider_args
from views.server.state import get_model

LOW = 0.25  # a chosen token below this probability is marked as a long shot in the answer strip

page_header("Next token", "After the last layer the model gives every one of its V tokens a score (a logit). "
            "Softmax turns the scores into probabilities, the filters below cut the unlikely tail, and one "
            "token is drawn. Everything here works on scores stored during the run: no slider on this page "
            "runs the model again.")
trace = run_for_page()
tok = get_model().tokenizer
V = trace.dims.V
run = trace.request.options  # the settings the run itself used
STAGE_TITLES = {"softmax": "softmax (T = 1)", "penalties": "after penalties and bias",
                "temperature": "after temperature", "top_k": "after top-k",
                "top_p": "after top-p", "min_p": "after min-p"}

# --- the whole answer: where was the model unsure, where did it take a long shot? ---------------------
S = len(trace.step_logits)  # step_logits (S, V)
generated = trace.generated_token_ids  # (S,)
answer = token_pieces(tok, generated)  # '토 (1/3)' for a token that is part of a character
conf = answer_confidence(trace.step_logits, generated)  # prob, entropy (bits), choices, rank: (S,) each
st.subheader("The answer, step by step")
base_model_note()
if trace.finish_reason == "length":
    st.warning(f"This answer was cut off: it reached the limit of {trace.request.options.max_new_tokens} new tokens "
               "(finish_reason = length), so it may stop mid-sentence. Raise “max new tokens” in the sidebar for "
               "the whole answer.")
strip_labels = [plotly_label(f"{s}: {p.label}") for s, p in enumerate(answer)]
strip = go.Figure([
    go.Bar(x=strip_labels, y=conf["prob"], name="probability of the chosen token", showlegend=False,
           marker_color=["#dc2626" if r > 1 and x < LOW else "#93c5fd" if x < LOW else "#2a6f97"
                         for x, r in zip(conf["prob"], conf["rank"])],
           customdata=np.stack([conf["entropy"], conf["choices"], conf["rank"]], axis=1),
           hovertemplate="step %{x}<br>chosen with probability %{y:.1%} (rank %{customdata[2]})<br>"
                         "uncertainty %{customdata[0]:.2f} bits ≈ %{customdata[1]:.1f} choices<extra></extra>"),
    go.Scatter(x=strip_labels, y=conf["entropy"], name="uncertainty (entropy, bits)", yaxis="y2", mode="lines+markers",
               line=dict(color="#f59e0b"), hoverinfo="skip"),
])
strip.update_layout(height=330, margin=dict(t=30, b=10, l=10, r=10), legend=dict(orientation="h", y=1.15),
                    yaxis=dict(title="chosen token's probability", tickformat=".0%", range=[0, 1],
                               tickfont=TICK_FONT),
                    yaxis2=dict(title="uncertainty (bits)", overlaying="y", side="right", tickfont=TICK_FONT,
                                range=[0, max(1.0, float(conf["entropy"].max()) * 1.05)], dtick=2, showgrid=False),
                    clickmode="event+select", dragmode=False)
token_axis(strip, "x", strip_labels, angle=-60)


def jump_to_step() -> None:
    points = st.session_state.nt_strip.selection.points
    if points and S > 1:
        st.session_state.nt_step = int(points[0]["point_index"])


st.plotly_chart(strip, width="stretch", key="nt_strip", on_select=jump_to_step, selection_mode="points")
shots = [int(s) for s in np.argsort(conf["prob"]) if conf["prob"][s] < LOW and conf["rank"][s] > 1][:5]
unsure = [int(s) for s in np.argsort(-conf["entropy"])][:3]
st.caption("Each bar is one answer token: how likely the model thought it was (softmax at temperature 1, before the "
           f"run's own filters). Red: a long shot, a token under {LOW:.0%} that was not the favourite (only a sampled "
           f"run takes those); light blue: the favourite, but under {LOW:.0%}. The orange line is the model's "
           "uncertainty before choosing, in bits: 0 = sure, 1 bit ≈ a coin toss between two tokens, n bits ≈ 2ⁿ "
           "equally likely choices. Click a bar to open that step below. "
           + ("Long shots taken: " + ", ".join(f"step {s} ({code_span(answer[s].label)}, {conf['prob'][s]:.0%}, "
                                              f"rank {conf['rank'][s]})" for s in shots) + ". " if shots else
              "No long shots were taken. ")
           + "Most uncertain: " + ", ".join(f"step {s} ({conf['entropy'][s]:.1f} bits)" for s in unsure) + ".")

# --- which step -----------------------------------------------------------------------------------
declare("nt_step", integer(0, 4096), older=("step",))  # here: a link's step, then kept in this run's range
if not 0 <= st.session_state.get("nt_step", 0) <= max(S - 1, 1):  # a shorter run than the last one
    st.session_state.nt_step = 0
st.session_state.setdefault("nt_step", 0)  # set here, not as the slider's default: a click on the strip sets it too
step = st.slider("Generation step (0 = the first answer token, right after the prompt)", 0, max(S - 1, 1),
                 disabled=S < 2, key="nt_step") if S > 1 else 0
logits = trace.step_logits[step].astype(np.float64)  # (V,)
context = trace.ids + generated[:step]  # what the model had read when it chose this step's token


def name(token_id: int) -> str:
    """A candidate at this step, named with what it does to an unfinished character ('<0xA0> → 토')."""
    return continuation_label(tok, context, int(token_id))


so_far = render_bytes(b"".join(p.raw for p in answer[:step] if not p.special))
chosen = trace.steps[step]
st.caption("Answer so far, and the token the run chose at this step (␣ = space, ↵ = new line, <0x..> = a byte of a "
           "character not finished yet):")
st.code(f"answer so far: {so_far or '(nothing yet)'}\n"
        f"chosen next:   {answer[step].with_bytes}  (id {chosen.token_id}), "
        f"probability {conf['prob'][step]:.1%}, rank {conf['rank'][step]}; uncertainty {conf['entropy'][step]:.2f} "
        f"bits ≈ {conf['choices'][step]:.1f} choices", language=None, wrap_lines=True)

# --- top candidates ---------------------------------------------------------------------------------
raw = softmax(logits)  # (V,)
table = pd.DataFrame(candidates(tok, logits, 15))
table["token"] = [name(i) for i in table["id"]]
table["probability"] = table["probability"].map(lambda x: f"{x:.2%}")
st.subheader("Top candidates")
st.dataframe(table, hide_index=True, width="stretch", height=35 * (len(table) + 1) + 3)
st.caption(f"Scores for all V = {V:,} tokens exist; these are the 15 highest. Probability = e^logit / sum of "
           "e^logit over the whole vocabulary.")

# --- raw -> final, stage by stage, with the run's own settings -----------------------------------------------
st.subheader("From the raw probability to the final one")
run_stages = filter_stages(logits, run, trace.ids, generated[:step])  # what this step's token was chosen from
shown_ids = list(dict.fromkeys([chosen.token_id, *np.argsort(-raw)[:10].tolist()]))
columns = {"softmax": "raw (softmax, T = 1)", "penalties": "after penalties and bias",
           "temperature": "after temperature", "min_p": "final (after top-k, top-p, min-p)"}
by_name = {s.name: s.probs for s in run_stages}
st.dataframe(pd.DataFrame({"token": [name(i) + (" ← chosen" if i == chosen.token_id else "") for i in shown_ids],
                           "id": shown_ids,
                           **{title: [f"{by_name[n][i]:.2%}" for i in shown_ids] for n, title in columns.items()}}),
             hide_index=True, width="stretch", column_config={"token": st.column_config.TextColumn(width="medium")})
penalties = [f"repetition penalty {run.repetition_penalty:g}" if run.repetition_penalty != 1 else "",
             f"presence penalty {run.presence_penalty:g}" if run.presence_penalty else "",
             f"frequency penalty {run.frequency_penalty:g}" if run.frequency_penalty else "",
             f"a logit bias on {plural(len(run.logit_bias), 'token')}" if run.logit_bias else ""]
st.caption("The chosen token and the ten best raw candidates, with the run's own settings. Penalties and the bias "
           "change the raw scores first: the repetition penalty divides the positive score (multiplies the negative "
           "one) of every token already in the prompt or the answer; the presence penalty subtracts a fixed amount "
           "from each token the answer has used, the frequency penalty that amount again for every use; the bias is "
           "added as it is. Then temperature, then the filters. "
           + ("This run used " + ", ".join(p for p in penalties if p) + "." if run.penalized else
              "This run used no penalty and no bias, so the first two columns are the same."))


# --- sampling controls (local to this page); they start from the run's own settings -------------------
DRAWS = [10, 30, 100, 300, 1000, 3000, 10000]  # the number of draws offered
RUN_SETTINGS = {"nt_temperature": float(run.temperature), "nt_top_k": int(run.top_k), "nt_top_p": float(run.top_p),
                "nt_min_p": float(run.min_p), "nt_seed": int(run.seed or 0)}
if st.session_state.get("nt_run_id") != trace.request.id:  # a new run: start again from its settings (a link's
    st.session_state.update(RUN_SETTINGS, nt_run_id=trace.request.id)  # own win as the controls are drawn)


@fragment
def sampler() -> None:
    st.subheader("Temperature and the filters")
    st.caption("Temperature divides every score before softmax: below 1 the favourite gets sharper, above 1 the "
               "outsiders come back, 0 always picks the favourite. Then top-k keeps the k best, top-p keeps the best "
               "until their total reaches p, min-p drops any token under min-p × the favourite's probability. "
               + TIE_RULE)
    c = st.columns(5)
    r = option_ranges(V)  # the sidebar's ranges
    temperature = linked(c[0].slider, "nt_temperature", option("temperature"), "temperature",
                         **slider_args(r["temperature"]), older=("t",))
    top_k = linked(c[1].number_input, "nt_top_k", option("top_k"), "top-k (0 = off)", **slider_args(r["top_k"]))
    top_p = linked(c[2].slider, "nt_top_p", option("top_p"), "top-p", **slider_args(r["top_p"]))
    min_p = linked(c[3].slider, "nt_min_p", option("min_p"), "min-p", **slider_args(r["min_p"]))
    seed = linked(c[4].number_input, "nt_seed", option("seed"), "seed (this page only)",
                  **slider_args(r["seed"]))  # from session state
    opts = replace(run, temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),  # the run's penalties
                   min_p=float(min_p), seed=int(seed))
    moved = [k.removeprefix("nt_").replace("_", "-") for k, v in RUN_SETTINGS.items()
             if k != "nt_seed" and st.session_state[k] != v]
    if moved:
        st.info(f"You moved {', '.join(moved)} away from the run's own settings (temperature {run.temperature}, "
                f"top-k {run.top_k}, top-p {run.top_p}, min-p {run.min_p}): what you see below is what the model "
                "would have drawn from, not what it did.")
        st.button("Back to the run's settings", key="nt_reset", on_click=lambda: st.session_state.update(RUN_SETTINGS))
    else:
        st.caption("These are the run's own settings: the chart shows exactly what the token above was chosen from.")
    stages = filter_stages(logits, opts, trace.ids, generated[:step])
    final = stages[-1].probs  # (V,)
    shown = np.argsort(-raw)[:12]
    labels = [plotly_label(f"{name(i)} ({i})") for i in shown]
    fig = go.Figure([go.Bar(name=STAGE_TITLES[s.name], x=labels, y=s.probs[shown],
                            hovertemplate="%{x}<br>%{y:.2%}<extra>" + STAGE_TITLES[s.name] + "</extra>")
                     for s in stages])
    fig.update_layout(barmode="group", height=400, margin=dict(t=30, b=10), yaxis_tickformat=".0%",
                      xaxis_title="candidate token (12 best of V)", yaxis_title="probability",
                      legend=dict(orientation="h", y=1.12), font=dict(size=13))
    st.plotly_chart(fig, width="stretch", key="nt_stages_chart")
    st.markdown(" → ".join(f"**{STAGE_TITLES[s.name]}**: {plural(s.kept, 'token')} can still be drawn"
                           for s in stages))

    st.subheader("Draw many times")
    d1, d2 = st.columns([3, 1])
    n = linked(d1.select_slider, "nt_draws", choice(DRAWS), "number of draws N", DRAWS, 1000, older=("draws",))
    d2.button("Draw again (next seed)", key="nt_draw",
              on_click=lambda: st.session_state.update(nt_seed=int(st.session_state.nt_seed) + 1))
    picks = draw(final, n, np.random.default_rng(int(seed)))  # (N,) token ids
    freq = empirical(picks, V)  # (V,)
    possible = np.argsort(-final)[:min(15, int((final > 0).sum()))]
    rest_theory, rest_seen = 1 - final[possible].sum(), 1 - freq[possible].sum()
    names = [plotly_label(f"{name(i)} ({i})") for i in possible] + (["all others"] if rest_theory > 1e-9 else [])
    theory = list(final[possible]) + ([rest_theory] if rest_theory > 1e-9 else [])
    seen = list(freq[possible]) + ([rest_seen] if rest_theory > 1e-9 else [])
    fig = go.Figure([go.Bar(name=f"share of {plural(n, 'draw')}", x=names, y=seen, marker_color="#f4a261"),
                     go.Scatter(name="theoretical probability", x=names, y=theory, mode="markers",
                                marker=dict(symbol="line-ew-open", size=28, line=dict(width=3), color="#264653"))])
    fig.update_layout(height=380, margin=dict(t=30, b=10), yaxis_tickformat=".0%", legend=dict(orientation="h", y=1.12),
                      xaxis_title="drawn token (id)", yaxis_title="share of draws", font=dict(size=13))
    st.plotly_chart(fig, width="stretch", key="nt_draws_chart")
    first = int(picks[0])
    st.markdown(f"First draw with seed {seed}: {code_span(name(first))}. "
                f"Largest gap between what was seen and the theory: {np.abs(freq - final).max():.2%} "
                f"(it shrinks roughly like 1/√N).")
    url_state.sync()  # this fragment reruns alone: the link follows its controls here


sampler()


# --- constrained output ------------------------------------------------------------------------------
constrained(tok, logits, raw, name)
back_next()
