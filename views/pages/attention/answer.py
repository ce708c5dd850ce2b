"""Attention over the answer too: the Attention page's grids for the prompt followed by the generated tokens, from one
more captured pass over them (the run's own prefill covers the prompt only)."""
import streamlit as st

from pipeline.model.prefill_record import Prefill
from views.links.controls import linked
from views.links.params import boolean
from views.server.state import get_model


@st.cache_resource(max_entries=2, show_spinner="Running the prompt and the answer once more, with hooks...")
def _answer_prefill(model_name: str, ids: tuple) -> Prefill:
    from pipeline.model.prefill import run_prefill  # torch: only once the answer is asked for

    return run_prefill(get_model(), list(ids)).prefill


def attention_ids(trace) -> tuple[list[int], Prefill, str]:
    """(the ids the grids show, their captured pass, a cache key for them): the prompt's own, or, with the toggle
    on, the prompt and the answer (each answer token looking back at the prompt and the answer before it)."""
    answer = list(trace.generated_token_ids)
    on = bool(answer) and linked(
        st.toggle, "at_answer", boolean,
        f"include the answer ({len(answer):,} tokens after the prompt's {len(trace.ids):,})",
        help="The answer's tokens are fed back one at a time while it is generated; here they run in one pass with "
             "the prompt, so each answer token's row shows what it looked at when it was read.")
    if not on:
        return list(trace.ids), trace.prefill, trace.request.id
    ids = list(trace.ids) + answer
    return ids, _answer_prefill(trace.dims.name, tuple(ids)), f"{trace.request.id}+answer"
