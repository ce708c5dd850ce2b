"""N samples of the sidebar's request drawn together in one batch (pipeline.run.samples), through the model's queue
and kept for everyone, and drawn side by side with their tokens aligned by position, each disagreeing position
marked and shaded by how much the samples' next-token distributions differ there: Generation's "Branch: N samples"
(views/pages/generation/branches.py, whose widgets pick N, the temperatures and the seed) and the presenter's "Many
answers at once" draw them so.

Which samples: the Branch section's link controls (`gen.branch_n`, `gen.branch_seed`, `gen.branch_t0` ...
`gen.branch_t7`) read by `sample_plan` into (temperatures, seed), with the section's defaults for the ones absent.
The presenter's screen and a lesson's runs prepared at start read the stage's controls through it (over
ROOM_CONTROLS: `room_plan`), so they queue the same draw (`samples_key`).

    sample_plan({"gen.branch_n": "3", "gen.branch_t1": "1.5", "gen.branch_seed": "7"})
      -> SamplePlan(temperatures=(1.0, 1.5, 1.0), seed=7, notes=())
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import streamlit as st

from pipeline.core.errors import InputError
from pipeline.run.samples import MAX_SAMPLES, SampleSet
from pipeline.server.run_queue import cost_of
from pipeline.stages.request import OPTION_RANGES, ChatRequest
from pipeline.text.pieces import token_pieces
from ui.escape import html_text
from ui.words import plural
from views.links.params import integer, option
from views.request.session import request_key
from views.server.state import APP_MAX_PROMPT_TOKENS, get_model
from views.server.waiting import result_through_queue, stored_result, submit_result

SHADE = (234, 88, 12)  # the disagreement's colour (orange); its opacity follows the divergence
MAX_BASE_SEED = OPTION_RANGES["seed"].hi - MAX_SAMPLES  # sample i's seed S + i stays a seed the app accepts
# The Branch section's controls: each one's parser (the widget's link parser) and its default
BRANCH_N = integer(2, MAX_SAMPLES)
BRANCH_SEED = integer(0, MAX_BASE_SEED)
BRANCH_T = option("temperature")
DEFAULT_N, DEFAULT_SEED, DEFAULT_T = 4, 0, 1.0
# The presenter's "Many answers at once" where its stage sets no other: sample 0 greedy, three at T = 1 (chance
# alone parts them), base seed 0 (the Branch section at its defaults but sample 0)
ROOM_CONTROLS = {"gen.branch_n": "4", "gen.branch_t0": "0", "gen.branch_seed": "0"}
# the section's switch and the controls sample_plan reads: what a room carries for its "Many answers at once"
BRANCH_CONTROLS = ("gen.branch_on", "gen.branch_n", "gen.branch_seed",
                   *(f"gen.branch_t{i}" for i in range(MAX_SAMPLES)))


@dataclass(frozen=True)
class SamplePlan:
    temperatures: tuple[float, ...]  # one per sample (N of them)
    seed: int  # sample i draws with seed + i
    notes: tuple[str, ...] = ()  # each control that could not be used: its value, why, and what is used instead

    def describe(self) -> str:
        """The samples in words: 'sample 0 greedy (T = 0, seed 0), samples 1 to 3 at T = 1 (seeds 1 to 3)'."""
        groups: list[list[int]] = []  # runs of neighbouring samples with the same temperature
        for i, t in enumerate(self.temperatures):
            if groups and self.temperatures[groups[-1][0]] == t:
                groups[-1].append(i)
            else:
                groups.append([i])
        return ", ".join(self._group(g) for g in groups)

    def _group(self, group: list[int]) -> str:
        t, first, last = self.temperatures[group[0]], group[0], group[-1]
        seeds = f"seed {self.seed + first}" if first == last else f"seeds {self.seed + first} to {self.seed + last}"
        who = f"sample {first}" if first == last else f"samples {first} to {last}"
        return f"{who} greedy (T = 0, {seeds})" if t == 0 else f"{who} at T = {t:g} ({seeds})"


def sample_plan(controls: Mapping[str, str]) -> SamplePlan:
    """The samples a stage's (or a link's) controls ask for: N from `gen.branch_n`, the base seed from
    `gen.branch_seed`, sample i's temperature from `gen.branch_t{i}`, each read by the Branch widget's own parser;
    an absent one is the section's default (N = 4, seed 0, T = 1), a value that does not parse is the default too,
    with a note. Temperatures of samples past N are not read (the section shows no widget for them)."""
    notes: list[str] = []

    def read(name: str, parse, default):
        if name not in controls:
            return default
        raw = str(controls[name])
        try:
            return parse(raw)
        except (ValueError, TypeError, InputError) as e:
            notes.append(f"{name}: {e}; the default {default:g} is used instead.")
            return default
    n = read("gen.branch_n", BRANCH_N, DEFAULT_N)
    seed = read("gen.branch_seed", BRANCH_SEED, DEFAULT_SEED)
    temperatures = tuple(float(read(f"gen.branch_t{i}", BRANCH_T, DEFAULT_T)) for i in range(n))
    return SamplePlan(temperatures, int(seed), tuple(notes))


def branch_controls(controls: Mapping[str, str]) -> dict[str, str]:
    """The Branch section's controls (BRANCH_CONTROLS) out of a lesson stage's or a room's link parameters."""
    return {name: str(value) for name, value in controls.items() if name in BRANCH_CONTROLS}


def room_plan(controls: Mapping[str, str]) -> SamplePlan:
    """The presenter's "Many answers at once" for a stage with these link controls: its Branch controls over
    ROOM_CONTROLS, read by sample_plan (so sample 0 is greedy unless the stage sets `gen.branch_t0`). The screen and a
    lesson's runs prepared at start both ask here."""
    return sample_plan({**ROOM_CONTROLS, **branch_controls(controls)})


def samples_key(request: ChatRequest, temperatures, seed: int) -> tuple:
    """Where the draw is kept (under the picked model's results): the request, each temperature, the base seed."""
    return ("samples", request_key(request), tuple(float(t) for t in temperatures), int(seed))


def _job(request: ChatRequest, temperatures: list[float], seed: int) -> tuple[tuple, Callable[[], SampleSet], int, int]:
    """(key, compute, cost, prompt tokens): the draw as the model's queue takes it."""
    from pipeline.run.samples import draw_samples
    from pipeline.stages.tokens import tokenize_request

    n_prompt = len(tokenize_request(get_model().tokenizer, request).ids)
    work = lambda: draw_samples(request, get_model(), temperatures, seed, APP_MAX_PROMPT_TOKENS)  # noqa: E731
    return (samples_key(request, temperatures, seed), work,
            cost_of(n_prompt, len(temperatures) * request.options.max_new_tokens), n_prompt)


def draw(request: ChatRequest, temperatures: list[float], seed: int) -> SampleSet:
    """The samples, drawn once per server through the model's queue and kept for everyone."""
    key, work, cost, n_prompt = _job(request, temperatures, seed)
    return result_through_queue(key, work, cost, n_prompt)


def submit_samples(request: ChatRequest, plan: SamplePlan):
    """The plan's samples of `request` queued, not waited for (a lesson's runs prepared at start): (their key as
    draw keeps them, the queue's ticket or None when they are stored already)."""
    key, work, cost, n_prompt = _job(request, list(plan.temperatures), plan.seed)
    return key, None if stored_result(key) is not None else submit_result(key, work, cost, n_prompt)


def samples_table(samples: SampleSet, labels: list[list[str]], font_size: str = "0.85em", height_px: int = 480) -> str:
    """One row per position, one column per sample; a disagreeing row marked ◆ and shaded by its divergence.
    labels: each sample's tokens as text (escaped here); font_size, height_px: the table's type and its scrolled
    height (larger on a projector)."""
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
    return (f"<div style='max-height:{height_px}px;overflow:auto'><table style='border-collapse:collapse;"
            f"font-size:{font_size}'>"
            f"<tr><th>position</th>{head}<th>divergence (bits)</th></tr>{''.join(rows)}</table></div>")


def samples_side_by_side(samples: SampleSet, font_size: str = "0.85em", height_px: int = 480) -> list[list[str]]:
    """The samples side by side (samples_table), whether and where they disagree, and the measure; Generation's
    section and the presenter's "Many answers at once" draw them so. Returns each sample's tokens as text."""
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
    st.markdown(samples_table(samples, labels, font_size, height_px), unsafe_allow_html=True)
    st.caption(f"Shade: the {samples.measure}. Where samples of the same temperature first part it is 0: they drew "
               "different tokens from the same distribution; from then on they read different text, and their "
               f"distributions differ. A sample that has ended shows ·. Drawn in {samples.draw_s:.2f} s (prefill "
               "once, then one batched pass per step).")
    return labels
