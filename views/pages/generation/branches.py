"""Generation's "Branch: N samples": N samples of the sidebar's request drawn together in one batch
(pipeline.run.samples), side by side with their tokens aligned by position, each disagreeing position marked and
shaded by how much the samples' next-token distributions differ there; a token picked shows its top-5 alternatives
and a link that opens What if at that step of that sample."""
from __future__ import annotations

from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.run.samples import MAX_SAMPLES, SampleSet
from pipeline.server.run_queue import cost_of
from pipeline.stages.request import OPTION_RANGES, ChatRequest
from pipeline.text.pieces import token_pieces
from ui.escape import html_text, markdown_text
from ui.words import plural
from views.links.controls import linked
from views.links.params import boolean, integer, option
from views.links.url_state import request_params
from views.request.session import request_key
from views.request.slider_args import slider_args
from views.server.state import APP_MAX_PROMPT_TOKENS, get_model
from views.server.waiting import result_through_queue

MAX_BASE_SEED = OPTION_RANGES["seed"].hi - MAX_SAMPLES  # sample i's seed S + i stays a seed the app accepts
SHADE = (234, 88, 12)  # the disagreement's colour (orange); its opacity follows the divergence


def draw(request: ChatRequest, temperatures: list[float], seed: int) -> SampleSet:
    """The samples, drawn once per server through the model's queue and kept for everyone."""
    from pipeline.run.samples import draw_samples
    from pipeline.stages.tokens import tokenize_request

    n_prompt = len(tokenize_request(get_model().tokenizer, request).ids)
    work = lambda: draw_samples(request, get_model(), temperatures, seed, APP_MAX_PROMPT_TOKENS)  # noqa: E731
    return result_through_queue(("samples", request_key(request), tuple(temperatures), seed), work,
                                cost=cost_of(n_prompt, len(temperatures) * request.options.max_new_tokens),
                                prompt_tokens=n_prompt)


def samples_table(samples: SampleSet, labels: list[list[str]]) -> str:
    """One row per position, one column per sample; a disagreeing row marked ◆ and shaded by its divergence.
    labels: each sample's tokens as text (escaped here)."""
    head = "".join(f"<th>sample {i}<br><small>seed {s.seed} · T {s.temperature:g}</small></th>"
                   for i, s in enumerate(samples.samples))
    rows = []
    for p in samples.positions:
        shade = f"rgba{(*SHADE, round(0.12 + 0.8 * (p.divergence or 0.0), 3))}" if p.disagree else "transparent"
        cells = "".join("<td style='color:#9ca3af'>·</td>" if t is None
                        else f"<td><code>{html_text(labels[i][p.position])}</code></td>"
                        for i, t in enumerate(p.token_ids))
        div = "" if p.divergence is None else f"{p.divergence:.3f}"
        title = f"position {p.position}: " + ("the samples disagree" if p.disagree else "the samples agree") + \
                (f", divergence {div} bits" if div else "")
        rows.append(f"<tr style='background:{shade}' title='{html_text(title)}'><td>{'◆ ' if p.disagree else ''}"
                    f"{p.position}</td>{cells}<td>{div}</td></tr>")
    return ("<div style='max-height:480px;overflow:auto'><table style='border-collapse:collapse;font-size:0.85em'>"
            f"<tr><th>position</th>{head}<th>divergence (bits)</th></tr>{''.join(rows)}</table></div>")


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
    n = linked(c1.slider, "gen_branch_n", integer(2, MAX_SAMPLES), "samples (N)", 2, MAX_SAMPLES, 4)
    seed = linked(c2.number_input, "gen_branch_seed", integer(0, MAX_BASE_SEED), "base seed S (sample i gets S + i)",
                  0, MAX_BASE_SEED, 0)
    on = linked(c3.toggle, "gen_branch_on", boolean, "Draw them", False,
                help="Runs the model: N answers in one batch (kept for everyone once drawn).")
    cols = st.columns(n)
    temperatures = [linked(cols[i].number_input, f"gen_branch_t{i}", option("temperature"), f"T of sample {i}",
                           value=1.0, **slider_args(OPTION_RANGES["temperature"])) for i in range(n)]
    if not on:
        st.caption("Turn on “Draw them” to draw the samples.")
        return
    try:
        samples = draw(request, temperatures, int(seed))
    except InputError as e:
        st.warning(markdown_text(e))
        return
    show_samples(samples)


def show_samples(samples: SampleSet) -> None:
    tok = get_model().tokenizer
    labels = [[q.label for q in token_pieces(tok, s.generated_token_ids)] for s in samples.samples]
    parted = [p for p in samples.positions if p.disagree]
    if samples.all_identical:
        st.info(f"All {len(samples.samples)} samples are identical, token for token. At a low temperature the "
                "likeliest token wins almost every time: raise the samples' temperatures (1.0 or more) to see them "
                "part.", icon="🟰")
    else:
        st.markdown(f"The samples disagree at **{plural(len(parted), 'position')}** of {len(samples.positions)} "
                    f"(◆, shaded by how much their next-token distributions differ there).")
    st.markdown(samples_table(samples, labels), unsafe_allow_html=True)
    st.caption(f"Shade: the {samples.measure}. Where samples of the same temperature first part it is 0: they drew "
               "different tokens from the same distribution; from then on they read different text, and their "
               f"distributions differ. A sample that has ended shows ·. Drawn in {samples.draw_s:.2f} s (prefill "
               "once, then one batched pass per step).")
    pick_token(samples, labels)


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
