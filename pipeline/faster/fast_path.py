"""The plain serving path beside the captured one: no hooks, no per-step candidate tables, SDPA,
the sampler on the model's own device, and decode steps run straight from the weights into a
preallocated K/V cache (pipeline.model.decoders.plain) rather than through HF's forward. Same
weights, same tokens (greedy is tested equal), so a page can put "captured: X ms/token" next to
"plain serving: Y ms/token" for the same request, and stream an answer live as it is produced.

    for event in stream(lm, request):     # StreamEvent(kind=TEXT_DELTA, delta="The", step=0, t_s=0.41, ...)
        ...                               # ..., then StreamEvent(kind=COMPLETED, finish_reason=EOS, ...)

It runs the captured path's own loop (pipeline.stages.generation.stream_answer) with recording off: the
two paths differ only in the decoder they step. `speculate=k` steps it through speculative decoding instead
(pipeline.faster.speculative.verify: k drafts checked per pass, the same greedy tokens).
"""
from __future__ import annotations

import time
from typing import Callable, Iterator

from pipeline.core.errors import InputError
from pipeline.faster.speculative.rounds import check_drafts
from pipeline.faster.speculative.verify import SpeculativeDecoder
from pipeline.model.decoders.factory import open_decoder
from pipeline.model.decoders.protocol import Decoder
from pipeline.model.interface import LanguageModel
from pipeline.model.past import NOTHING, Reuse
from pipeline.stages.decode_record import StreamEvent
from pipeline.stages.generation import Answer, stream_answer
from pipeline.stages.logit_bias import check_vocabulary
from pipeline.stages.request import ChatRequest
from pipeline.stages.request_lifecycle import check_fits, request_id
from pipeline.stages.tokens import tokenize_request


def open_answer(lm: LanguageModel, request: ChatRequest, max_prompt_tokens: int | None = None,
                on_event: Callable[[StreamEvent], None] | None = None, speculate: int = 0,
                reuse: Reuse | None = None) -> tuple[Answer, Decoder]:
    """The request prefilled on the plain path: its Answer (nothing recorded per step) and the decoder
    to step it with (a SpeculativeDecoder checking `speculate` drafts per pass, if not 0). reuse: the server's
    prefix cache (pipeline.prompt_cache.reuse): the cached blocks the prompt starts with are not run again
    (the Answer's reused_positions), and its own are kept."""
    if speculate:
        check_drafts(speculate)
        if not request.options.greedy:
            raise InputError("speculative", "drafts are checked against the greedy choice: set temperature to 0.")
        if request.options.penalized:  # the draft check compares with the raw scores' argmax
            raise InputError("speculative", "drafts are checked against the model's own greedy choice: turn the "
                                            "penalties and the logit bias off.")
    t0 = time.perf_counter()
    ids = tokenize_request(lm.tokenizer, request).ids
    check_fits(lm.dims, len(ids), request.options.max_new_tokens, max_prompt_tokens)
    check_vocabulary(request.options, lm.dims.V)
    decoder = open_decoder(lm, len(ids) + request.options.max_new_tokens)  # a static K/V cache sized for the request
    past = reuse.take(lm, ids) if reuse is not None else NOTHING
    kept = (lambda kv_cache: reuse.keep(lm, ids, kv_cache)) if reuse is not None else None
    answer = Answer(lm, decoder.prefill(ids, past, kept), request.options, request_id(request, time.time()), t0,
                    record=False, on_event=on_event, prompt_ids=ids)
    answer.reused_positions = past.n
    return answer, (SpeculativeDecoder(decoder, speculate, ids) if speculate else decoder)


def stream(lm: LanguageModel, request: ChatRequest, max_prompt_tokens: int | None = None,
           on_event: Callable[[StreamEvent], None] | None = None, speculate: int = 0) -> Iterator[StreamEvent]:
    """Yield the answer's text_delta events as they are produced, then its completed event."""
    answer, decoder = open_answer(lm, request, max_prompt_tokens, on_event, speculate)
    yield from stream_answer(answer, decoder)


def generate(lm: LanguageModel, request: ChatRequest, max_prompt_tokens: int | None = None,
             on_event: Callable[[StreamEvent], None] | None = None, speculate: int = 0) -> Answer:
    """The whole answer on the plain path: `.generated` (ids), `.text`, `.finish_reason`, `.ttft_s`, `.tpot_s`."""
    return generate_with(lm, request, max_prompt_tokens, on_event, speculate)[0]


def generate_with(lm: LanguageModel, request: ChatRequest, max_prompt_tokens: int | None = None,
                  on_event: Callable[[StreamEvent], None] | None = None,
                  speculate: int = 0) -> tuple[Answer, Decoder]:
    """generate(), and the decoder it stepped (a SpeculativeDecoder holds its rounds of drafts)."""
    answer, decoder = open_answer(lm, request, max_prompt_tokens, on_event, speculate)
    for _ in stream_answer(answer, decoder):
        pass
    return answer, decoder
