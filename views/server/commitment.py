"""Where each answer token was decided (pipeline.stages.commitment) for a run the pages show: one more pass of the
picked model, its turn in the server's queue, over the prompt's blocks in the server's prefix cache; kept for
everyone in the result store, so Layers' strip and Journey's compact one read one pass."""
from __future__ import annotations

from pipeline.server.run_queue import cost_of
from pipeline.stages.commitment import Commitment, answer_commitment
from views.server.state import get_model, server_reuse
from views.server.waiting import result_through_queue, stored_result


def _key(prompt: list[int], answer: list[int]) -> tuple:
    return "commitment", tuple(prompt), tuple(answer)


def kept_commitment(prompt: list[int], answer: list[int]) -> Commitment | None:
    """The commitment already computed for this run on the picked model, or None: nothing runs."""
    return stored_result(_key(prompt, answer))


def run_commitment(prompt: list[int], answer: list[int]) -> Commitment:
    """The commitment of `answer` to `prompt` on the picked model (a Python object in the store: no copy per rerun)."""
    reuse, n = server_reuse(), len(prompt) + len(answer)
    return result_through_queue(_key(prompt, answer),
                                lambda: answer_commitment(get_model(), list(prompt), list(answer), reuse),
                                cost_of(n, 0), n)
