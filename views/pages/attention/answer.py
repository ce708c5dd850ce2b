"""Attention over the answer too: the Attention page's grids for the prompt followed by the generated tokens, from one
more captured pass over them (the run's own prefill covers the prompt only), its turn in the server's queue, over the
prompt's blocks (and their captures) in the server's prefix cache."""
import streamlit as st

from pipeline.model.prefill_record import Prefill
from pipeline.server.run_queue import cost_of
from pipeline.server.store.memory import RunStore
from views.links.controls import linked
from views.links.params import boolean
from views.server.state import get_model, server_reuse
from views.server.waiting import result_through_queue


ANSWER_PREFILLS_KEPT = 2  # a captured pass over a long prompt is hundreds of MB


@st.cache_resource
def answer_prefills() -> RunStore:
    """The last ANSWER_PREFILLS_KEPT answer passes, shared by every session: kept apart from result_store(), whose
    256 MB they would fill, pushing out every commitment, sample set and comparison it holds."""
    return RunStore(max_bytes=ANSWER_PREFILLS_KEPT, size_of=lambda _prefill: 1)


def _answer_prefill(ids: list[int]) -> Prefill:
    """The captured pass over `ids` on the picked model, through the queue, kept in answer_prefills()."""
    def run() -> Prefill:
        from pipeline.model.prefill import captured_past, run_prefill  # torch: only once the answer is asked for

        lm = get_model()
        return run_prefill(lm, ids, past=captured_past(lm, ids, reuse)).prefill

    reuse = server_reuse()
    return result_through_queue(("answer prefill", tuple(ids)), run, cost_of(len(ids), 0), len(ids),
                                store=answer_prefills())


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
    return ids, _answer_prefill(ids), f"{trace.request.id}+answer"
