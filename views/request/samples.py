"""N samples of the sidebar's request drawn together in one batch (pipeline.run.samples), through the model's queue
and kept for everyone, and drawn side by side with their tokens aligned by position, each disagreeing position
marked and shaded by how much the samples' next-token distributions differ there: Generation's "Branch: N samples"
(views/pages/generation/branches.py, which picks N, the temperatures and the seed) and the presenter's "Many answers
at once" (ROOM_TEMPERATURES, ROOM_SEED) draw them so."""
from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from pipeline.run.samples import SampleSet
from pipeline.server.run_queue import cost_of
from pipeline.stages.request import ChatRequest
from pipeline.text.pieces import token_pieces
from ui.escape import html_text
from ui.words import plural
from views.request.session import request_key
from views.server.state import APP_MAX_PROMPT_TOKENS, get_model
from views.server.waiting import result_through_queue, stored_result, submit_result

SHADE = (234, 88, 12)  # the disagreement's colour (orange); its opacity follows the divergence
# The presenter's "Many answers at once": sample 0 greedy, three at T = 1 (chance alone parts them), base seed 0:
# Generation's Branch section at its defaults (N = 4, each T = 1, seed 0) but sample 0 (gen.branch_t0=0) draws the same
ROOM_TEMPERATURES = (0.0, 1.0, 1.0, 1.0)
ROOM_SEED = 0


def _job(request: ChatRequest, temperatures: list[float], seed: int) -> tuple[tuple, Callable[[], SampleSet], int, int]:
    """(key, compute, cost, prompt tokens): the draw as the model's queue takes it."""
    from pipeline.run.samples import draw_samples
    from pipeline.stages.tokens import tokenize_request

    n_prompt = len(tokenize_request(get_model().tokenizer, request).ids)
    work = lambda: draw_samples(request, get_model(), temperatures, seed, APP_MAX_PROMPT_TOKENS)  # noqa: E731
    return (("samples", request_key(request), tuple(temperatures), seed), work,
            cost_of(n_prompt, len(temperatures) * request.options.max_new_tokens), n_prompt)


def draw(request: ChatRequest, temperatures: list[float], seed: int) -> SampleSet:
    """The samples, drawn once per server through the model's queue and kept for everyone."""
    key, work, cost, n_prompt = _job(request, temperatures, seed)
    return result_through_queue(key, work, cost, n_prompt)


def submit_room_samples(request: ChatRequest):
    """The presenter's samples of `request` (ROOM_TEMPERATURES, ROOM_SEED) queued, not waited for (a lesson's runs
    prepared at start); None when they are stored already."""
    key, work, cost, n_prompt = _job(request, list(ROOM_TEMPERATURES), ROOM_SEED)
    return None if stored_result(key) is not None else submit_result(key, work, cost, n_prompt)


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
