"""Why this token, section 5: patching a clean question into a corrupted one. Attribution patching estimates every
head and MLP at once (pipeline.attribution.component_patching), real patching checks the top ones, both as one long
job behind people's questions; the full layer x position map of the stream (real patching) on its own button. The
time each takes is said before it starts: its work units times this model's measured seconds per unit."""
from dataclasses import replace

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.attribution import component_patching as cp
from pipeline.attribution import interventions as iv
from pipeline.attribution import prefix as px
from pipeline.core.common_prefix import common_prefix_len
from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel
from pipeline.stages.tokens import tokenize_request
from pipeline.text.pieces import token_pieces
from pipeline.text.token_names import token_text
from ui.escape import axis_labels, markdown_text
from ui.plots import TICK_FONT, token_axis
from views.links.controls import linked
from views.links.params import integer, text
from views.server.long_job import long_job, made_line
from views.server.waiting import waiting_time

PATCH_POSITIONS = 48  # the full map reads at most the last 48 positions: (L + 1) passes of 48 rows
CHECKED = 12  # components patched for real by default: one pass


def patching_section(lm: LanguageModel, request, clean_ids: list[int], prefill_s: float | None = None) -> None:
    """The section: the corrupted question, the estimate and its check, the full map. prefill_s: the seconds this
    question's own prefill took (what the expected time reads before any patching has run here)."""
    st.subheader("5. Patching: a clean and a corrupted question")
    st.caption("Run a corrupted question of the same length, then copy one part of the clean run into it: a head's "
               "output or an MLP's output, at every position. Where the copy brings the clean answer back, that part "
               "carries what decides the answer. Attribution patching first estimates this for every part at once "
               "from one backward pass (a straight-line guess: the difference of the two runs' outputs times the "
               "gradient); then the parts with the largest estimates are patched for real, to check the guess. "
               "It runs behind the room's questions; the time it needs is said below before it starts.")
    question = request.messages[-1][1]
    default = question.replace("tomatoes", "carrots") if "tomatoes" in question else question
    corrupted = linked(st.text_input, "why_corrupted", text(), "corrupted question (same number of tokens)",
                       default)
    c1, c2 = st.columns([1, 2])
    top = linked(c1.number_input, "why_patch_top", integer(0, cp.MAX_CHECKED), "parts checked by real patching", 0,
                 cp.MAX_CHECKED, CHECKED,
                 help=f"The parts with the largest estimates, {iv.PATCH_ROWS_PER_PASS} per pass.")
    clicked = c2.button("Patch", key="why_patch")
    map_clicked = c2.button("The full map of the stream (real patching of every layer × position)",
                            key="why_patch_map")
    try:
        bad_ids = tokenize_request(lm.tokenizer, replace(request, messages=request.messages[:-1]
                                                         + (("user", corrupted),))).ids
        estimate = cp.estimate_steps(lm, clean_ids, bad_ids, int(top))  # checked now, run in the queue
        positions = tuple(range(max(0, len(clean_ids) - PATCH_POSITIONS), len(clean_ids)))
        full = iv.patch_residual_steps(lm, clean_ids, bad_ids, list(positions))
    except InputError as e:  # said when a button is pressed
        if clicked or map_clicked:
            st.error(markdown_text(e))
        return
    st.caption(expected_line(lm, clean_ids, bad_ids, int(top), positions, prefill_s))
    try:
        done = long_job(("component patching", tuple(clean_ids), tuple(bad_ids), int(top)), lambda: estimate,
                        "patching", start=clicked)
        if done is not None:
            draw_estimates(lm, done)
        mapped = long_job(("patching", tuple(clean_ids), tuple(bad_ids), positions), lambda: full,
                          "the full map", start=map_clicked)
        if mapped is not None:
            labels = axis_labels([p.label for p in token_pieces(lm.tokenizer, clean_ids)])  # (prompt position)token
            draw_map(lm, mapped, labels)
    except InputError as e:
        st.error(markdown_text(e))


def expected_line(lm: LanguageModel, clean_ids: list[int], bad_ids: list[int], top: int, positions: tuple,
                  prefill_s: float | None) -> str:
    """'Expected, of the model's time: Patch about 4 s, the full map about 1.5 min (...)': each job's work units
    (pipeline.attribution.prefix) times this model's measured seconds per unit."""
    fallback = prefill_s / px.pass_work(lm, 1, len(clean_ids), 0) if prefill_s else None
    patch = px.expected_s(lm, cp.patching_plan(lm, clean_ids, bad_ids, top), fallback)
    whole = px.expected_s(lm, iv.map_plan(lm, clean_ids, bad_ids, list(positions)), fallback)
    if patch is None or whole is None:
        return ""
    how = "the latest patching here, part by part" if px.measured_here(lm) else "this question's own prefill"
    d = common_prefix_len(clean_ids, bad_ids)
    where = ("the two questions are the same" if d == len(clean_ids) else
             f"the two questions differ from position {d:,} of {len(clean_ids):,}: only what follows is run again")
    about = lambda t: waiting_time(t) if t < 10 else f"about {waiting_time(t)}"  # noqa: E731
    return (f"Expected, of the model's time: **Patch: {about(patch)}**; **the full map: {about(whole)}** ({where}; "
            f"measured from {how}); longer while the room asks questions.")


def percent(x: float, sign: bool = False) -> str:
    """x as a whole percentage; one that rounds to 0 is '0%', never '-0%' or '+0%': -0.004 -> '0%', 0.07 -> '+7%'
    with sign."""
    whole = round(x * 100)
    if whole == 0:
        return "0%"
    return f"{whole:+d}%" if sign else f"{whole:d}%"


def part_name(layer: int, head: int | None) -> str:
    return f"layer {layer} " + ("MLP" if head is None else f"head {head}")


def draw_estimates(lm: LanguageModel, done) -> None:
    p: cp.ComponentPatching = done.value
    L, H = lm.dims.L, lm.dims.H
    z = [list(p.heads[i]) + [p.mlp[i]] for i in range(L)]
    fig = go.Figure(go.Heatmap(z=z, x=[f"head {h}" for h in range(H)] + ["MLP"], y=[str(i) for i in range(L)],
                               colorscale="RdBu", zmid=0, reversescale=True,
                               colorbar=dict(title="estimated", tickfont=TICK_FONT),
                               hovertemplate="layer %{y}, %{x}<br>estimated %{z:.0%} restored<extra></extra>"))
    fig.update_layout(height=max(360, 18 * L + 120), margin=dict(t=30, b=10),
                      title="attribution patching: each part's estimated share restored (layer × part)")
    fig.update_yaxes(title="layer", type="category", autorange="reversed", tickfont=TICK_FONT)
    st.plotly_chart(fig, width="stretch", key="why_patch_estimates")
    lead = (f"the clean answer's lead of “{markdown_text(token_text(lm.tokenizer, p.clean_id))}” over "
            f"“{markdown_text(token_text(lm.tokenizer, p.corrupted_id))}” ({p.clean_diff:+.2f} clean, "
            f"{p.corrupted_diff:+.2f} corrupted)")
    if not p.checked:
        st.caption(f"1 = {lead} fully back. No part was patched for real. First answer step only. {made_line(done)}")
        return
    rows = [{"part": part_name(c.layer, c.head), "estimated": percent(c.estimate), "real": percent(c.real),
             "real - estimated": percent(c.real - c.estimate, sign=True)} for c in p.checked]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    rho, overlap = p.agreement()
    n, k = len(p.checked), min(5, len(p.checked))
    worst = max(p.checked, key=lambda c: abs(c.real - c.estimate))
    st.markdown(f"Agreement over the {n} parts patched for real: rank correlation (Spearman) **{rho:.2f}**; "
                f"**{overlap} of the top {k}** by estimate are among the top {k} for real. Largest miss: "
                f"{part_name(worst.layer, worst.head)}, estimated {percent(worst.estimate)}, real "
                f"{percent(worst.real)}.")
    st.caption(f"1 = {lead} fully back. The estimate is linear: it misses most where copying a part changes a lot "
               "downstream (an early MLP that rewrites the word, a head that looks elsewhere). First answer step "
               f"only. {made_line(done)}")


def draw_map(lm: LanguageModel, mapped, labels: list[str]) -> None:
    p = mapped.value
    L = lm.dims.L
    cols = [labels[i] for i in p.positions]
    fig = go.Figure(go.Heatmap(z=p.restored, x=cols, y=[f"{i}" for i in range(L + 1)], colorscale="RdBu",
                               zmid=0, reversescale=True, colorbar=dict(title="restored", tickfont=TICK_FONT),
                               hovertemplate="position %{x}<br>before block %{y}<br>%{z:.0%} restored"
                                             "<extra></extra>"))
    fig.update_layout(height=max(420, 16 * L + 160), margin=dict(t=30, b=10))
    token_axis(fig, "x", cols, angle=-60, title="position patched")
    fig.update_yaxes(title=f"stream before block (L = {L}: after the last)", autorange="reversed",
                     type="category", tickfont=TICK_FONT)
    st.plotly_chart(fig, width="stretch", key="why_patching")
    st.caption(f"The full map: the whole stream at one layer × position copied. 1 = the clean answer's lead of "
               f"“{markdown_text(token_text(lm.tokenizer, p.clean_id))}” over "
               f"“{markdown_text(token_text(lm.tokenizer, p.corrupted_id))}” fully "
               f"back ({p.clean_diff:+.2f} clean, {p.corrupted_diff:+.2f} corrupted). {made_line(mapped)}")
