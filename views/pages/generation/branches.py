"""Generation's "Branch: N samples": N samples of the sidebar's request drawn together in one batch, side by side
(views/request/samples.py draws them, as the presenter's "Many answers at once" does), each with its own temperature
and seed chosen here; a token picked shows its top-5 alternatives and a link that opens What if at that step of that
sample. Its widgets read their link values with the parsers and defaults of views/request/samples.py (BRANCH_N,
BRANCH_SEED, BRANCH_T), the ones sample_plan reads a lesson stage's controls with for the presenter's screen."""
from __future__ import annotations

from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.run.samples import MAX_SAMPLES, SampleSet
from pipeline.stages.request import OPTION_RANGES, ChatRequest
from ui.escape import markdown_text
from views.links.controls import linked
from views.links.params import boolean, integer
from views.links.url_state import request_params
from views.request.samples import (
    BRANCH_N,
    BRANCH_SEED,
    BRANCH_T,
    DEFAULT_N,
    DEFAULT_SEED,
    DEFAULT_T,
    MAX_BASE_SEED,
    draw,
    samples_side_by_side,
)
from views.request.slider_args import slider_args


def what_if_href(sample_seed: int, temperature: float, step: int) -> str:
    """What if, opened at `step` of the run with this seed and temperature (the sidebar's request otherwise): that
    run is this sample, so What if branches from the sample's own answer. A link to open in a new tab, where the
    request is read from it."""
    query = {**request_params(), "temperature": f"{temperature:g}", "seed": str(sample_seed), "br.step": str(step)}
    return "./what-if?" + urlencode(query)


def branch_section(request: ChatRequest) -> None:
    st.subheader("5. Branch: N samples")
    st.markdown("The same request answered several times at once: the N samples are drawn together in **one batch** "
                "(the prompt is read once, its KV cache copied for each sample), each with its own temperature and "
                "its own seed, so each sample is the answer a single run with that seed and temperature gives "
                "(rarely, a draw that falls right at the edge between two tokens goes the other way: a batched "
                "pass rounds its scores a little differently). Where they part, the model had more than one likely "
                "continuation.")
    c1, c2, c3 = st.columns([2, 2, 1])
    n = linked(c1.slider, "gen_branch_n", BRANCH_N, "samples (N)", 2, MAX_SAMPLES, DEFAULT_N)
    seed = linked(c2.number_input, "gen_branch_seed", BRANCH_SEED, "base seed S (sample i gets S + i)",
                  0, MAX_BASE_SEED, DEFAULT_SEED)
    on = linked(c3.toggle, "gen_branch_on", boolean, "Draw them", False,
                help="Runs the model: N answers in one batch (kept for everyone once drawn).")
    cols = st.columns(n)
    temperatures = [linked(cols[i].number_input, f"gen_branch_t{i}", BRANCH_T, f"T of sample {i}",
                           value=DEFAULT_T, **slider_args(OPTION_RANGES["temperature"])) for i in range(n)]
    if not on:
        st.caption("Turn on “Draw them” to draw the samples.")
        return
    try:
        samples = draw(request, temperatures, int(seed))
    except InputError as e:
        st.warning(markdown_text(e))
        return
    pick_token(samples, samples_side_by_side(samples))


def pick_token(samples: SampleSet, labels: list[list[str]]) -> None:
    """A token picked (sample, position): its top-5 alternatives and the link to What if at that step."""
    n = len(samples.samples)
    c1, c2 = st.columns(2)
    i = linked(c1.selectbox, "gen_branch_sample", integer(0, MAX_SAMPLES - 1), "sample", list(range(n)),
               within=(0, n - 1), format_func=lambda k: f"sample {k} (seed {samples.samples[k].seed})")
    s = samples.samples[i]
    j = linked(c2.selectbox, "gen_branch_step", integer(0, 4096), "token", list(range(len(s.generated_token_ids))),
               within=(0, len(s.generated_token_ids) - 1), format_func=lambda k: f"({k}) {labels[i][k]}")
    rows = [{"token": a.text, "id": a.id, "probability (T = 1)": f"{a.prob:.1%}",
             f"probability drawn from (T = {s.temperature:g})": f"{a.prob_drawn:.1%}",
             "chosen": "✓" if a.id == s.generated_token_ids[j] else ""} for a in s.alternatives[j]]
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    st.markdown(f"[🌿 Open What if at step {j} of sample {i}]({what_if_href(s.seed, s.temperature, j)}) (a new tab: "
                f"the request with seed {s.seed} and temperature {s.temperature:g}, which is this sample's run).")
