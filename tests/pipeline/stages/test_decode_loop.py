"""The one decode loop (pipeline.stages.generation.stream_answer) on a scripted decoder: no weights.

The decoder's "logits" put all the weight on the next token of a script, so greedy decoding must
choose the script; what is checked is the loop around it: the typed events, the stop string, the
finish reasons, and that the captured (record=True) and the plain (record=False) answer agree.
"""
from __future__ import annotations

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pipeline.stages.decode_record import EventKind, FinishReason, StreamEvent
from pipeline.stages.generation import Answer, stream_answer
from pipeline.stages.request import GenerationOptions
from pipeline.stages.request_lifecycle import RequestState, RequestStatus


class ScriptedDecoder:
    """Each step returns scores (V,) whose best is the next id of `script`."""

    def __init__(self, script: list[int], V: int):
        self.script, self.V, self.fed = script, V, []

    def scores(self, i: int) -> torch.Tensor:
        logits = torch.zeros(self.V)
        logits[self.script[i]] = 10.0
        return logits

    def step(self, token: int) -> torch.Tensor:
        self.fed.append(token)
        return self.scores(len(self.fed))

    def usage(self) -> tuple[int, list[int]]:
        return 5 + len(self.fed), [64 * (5 + len(self.fed))] * 2  # 5 prompt positions, 2 layers of 64 bytes each


def _lm(tokenizer):
    config = SimpleNamespace(eos_token_id=tokenizer.eos_token_id)
    return SimpleNamespace(tokenizer=tokenizer, model=SimpleNamespace(generation_config=config))


def _run(tokenizer, text: str, record: bool, end: bool = False, **options):
    script = tokenizer.encode(text, add_special_tokens=False) + ([tokenizer.eos_token_id] if end else [])
    decoder = ScriptedDecoder(script, len(tokenizer))
    seen: list[StreamEvent] = []
    answer = Answer(_lm(tokenizer), decoder.scores(0), GenerationOptions(temperature=0.0, **options), "req_1",
                    time.perf_counter(), record=record, on_event=seen.append)
    events = list(stream_answer(answer, decoder))
    assert events == seen == answer.events  # on_event saw each event the stream yielded, in order
    return answer, events, script


@pytest.mark.parametrize("record", [True, False], ids=["captured", "plain"])
def test_the_loop_streams_typed_events_and_ends_on_the_end_token(tokenizer, record):
    answer, events, script = _run(tokenizer, "Tomatoes are a fruit.", record, end=True, max_new_tokens=64)
    assert all(isinstance(e, StreamEvent) for e in events)
    *deltas, done = events
    assert {e.kind for e in deltas} == {EventKind.TEXT_DELTA} and done.kind == EventKind.COMPLETED
    assert "".join(e.delta for e in deltas) == done.text == answer.text == "Tomatoes are a fruit."
    assert list(done.token_ids) == answer.generated == script  # the end token is chosen, and kept
    assert done.finish_reason is FinishReason.EOS and answer.finish_reason is FinishReason.EOS
    assert all(a.t_s <= b.t_s for a, b in zip(events, events[1:]))
    # one time per chosen token: the first from the request's start, the rest one step each, all inside the request
    assert len(answer.step_seconds) == len(script) and min(answer.step_seconds) >= 0
    assert answer.ttft_s == answer.step_seconds[0] == answer.first_at - answer.started_at
    assert answer.tpot_s == pytest.approx(np.mean(answer.step_seconds[1:]))
    assert sum(answer.step_seconds) <= done.t_s + 1e-9  # disjoint intervals between the start and the end
    assert [s.seconds for s in answer.steps] == (answer.step_seconds if record else [])


@pytest.mark.parametrize("record", [True, False], ids=["captured", "plain"])
def test_a_stop_string_ends_the_answer_before_it(tokenizer, record):
    answer, events, _ = _run(tokenizer, "Count: 1 2 3 4 5 6 7", record, stop=(" 4",), max_new_tokens=64)
    assert answer.text == "Count: 1 2 3" and events[-1].text == answer.text
    assert "".join(e.delta for e in events) == "Count: 1 2 3"
    assert events[-1].finish_reason is FinishReason.STOP


def test_max_new_tokens_ends_with_length(tokenizer):
    answer, events, script = _run(tokenizer, "Count: 1 2 3 4 5 6 7", True, max_new_tokens=3)
    assert answer.generated == script[:3] and events[-1].finish_reason is FinishReason.LENGTH


def test_the_captured_and_the_plain_answer_send_the_same_events(tokenizer):
    """Same loop, same script: the two differ only in what is recorded, not in what is streamed."""
    (captured, c_events, _), (plain, p_events, _) = (_run(tokenizer, "토마토는 과일이야.", r, end=True)
                                                     for r in (True, False))
    strip = lambda events: [(e.kind, e.step, e.delta, e.finish_reason, e.token_ids) for e in events]  # noqa: E731
    assert strip(c_events) == strip(p_events)
    assert len(captured.steps) == len(captured.generated) and plain.steps == []  # only the captured one records
    assert [s.kv_cache_tokens for s in captured.steps] == [5 + i for i in range(len(captured.steps))]
    decode = captured.result(0, 0)
    assert decode.events == c_events[:-1] and decode.finish_reason is FinishReason.EOS


def test_events_and_finish_reasons_keep_their_json(tokenizer):
    _, events, _ = _run(tokenizer, "Hi there.", True, end=True)
    *deltas, done = events
    assert json.loads(json.dumps(deltas[0].to_json())) == {"event": "text_delta", "request_id": "req_1",
                                                           "delta": deltas[0].delta, "step": 0}
    assert json.loads(json.dumps(done.to_json())) == {"event": "completed", "request_id": "req_1",
                                                      "finish_reason": "eos", "text": "Hi there.",
                                                      "generated_token_ids": list(done.token_ids)}
    assert FinishReason.EOS == "eos" and f"{FinishReason.STOP}" == "stop" and {"length": 1}[FinishReason.LENGTH] == 1


def test_request_states_are_an_enum_that_reads_as_text():
    state = RequestState("req_1", clock=iter([0.0, 0.5]).__next__)
    state.advance(RequestStatus.PREFILL)
    assert state.state is RequestStatus.PREFILL and state.state == "prefill"
    assert json.dumps(state.history) == '[{"state": "queued", "t_s": 0.0}, {"state": "prefill", "t_s": 0.5}]'
    with pytest.raises(RuntimeError, match="not a state"):
        state.advance("finished")


def test_a_forced_token_is_chosen_on_both_paths(tokenizer):
    """The plain answer's on-device argmax still honours a forced step, as the captured one does."""
    script = tokenizer.encode("Yes it is.", add_special_tokens=False)
    other = tokenizer.encode(" No", add_special_tokens=False)[0]
    for record in (True, False):
        decoder = ScriptedDecoder(script, len(tokenizer))
        answer = Answer(_lm(tokenizer), decoder.scores(0), GenerationOptions(temperature=0.0, max_new_tokens=2),
                        "req_1", time.perf_counter(), force={1: other}, record=record)
        list(stream_answer(answer, decoder))
        assert answer.generated == [script[0], other]
        assert np.array_equal(decoder.fed, [script[0]])  # the forced token ends the answer (max 2): not fed


def test_a_recorded_step_computes_the_softmax_over_the_vocabulary_once(tokenizer, monkeypatch):
    """The sampler's first stage is softmax(logits), the candidates' `prob`: one pass over V per step, not two
    (each is ~1 ms at V = 49,152, on every token of every answer); the recorded shares are still softmax's."""
    from pipeline.core.maths import softmax
    from pipeline.stages import generation, next_token

    calls = []

    def counted(x, *a, **k):
        calls.append(1)
        return softmax(x, *a, **k)
    monkeypatch.setattr(next_token, "softmax", counted)
    monkeypatch.setattr(generation, "softmax", counted)
    answer, _, script = _run(tokenizer, "Hello there my good friend", record=True, max_new_tokens=3)
    assert len(calls) == len(answer.steps) == 3
    for step, logits in zip(answer.steps, answer.logits_rows):
        probs = softmax(logits)
        assert [c.prob for c in step.top] == [float(probs[c.id]) for c in step.top]


@pytest.mark.parametrize("options", [dict(temperature=0.0, top_k=5, top_p=0.9, min_p=0.05),
                                     dict(temperature=0.7, top_k=5)], ids=["greedy", "sampled"])
def test_a_recorded_step_is_what_the_filter_stages_give(tokenizer, options):
    """A greedy step skips building the filter stages, and a batch hands each row its 10th-best score from one
    torch.topk: the recorded token and candidates must still be the stages' own and a stable sort's, on scores
    with ties (one decimal, as bf16 logits tie), the best two tied (the lower id is chosen)."""
    from pipeline.stages.next_token import filter_stages

    V = len(tokenizer)
    logits = np.round(np.random.default_rng(3).standard_normal(V) * 2, 1).astype(np.float32)
    logits[[1001, 1000]] = logits.max() + 1
    opts = GenerationOptions(max_new_tokens=4, **options)
    stages = filter_stages(logits, opts)
    top = np.argsort(-logits, kind="stable")[:10]
    expected = [(int(i), round(float(logits[i]), 4), float(stages[0].probs[i]), float(stages[-1].probs[i]))
                for i in top]
    answer = Answer(_lm(tokenizer), logits, opts, "req_1", time.perf_counter())
    answer.choose()  # k-th best found by the answer itself
    answer.fed(logits, float(torch.topk(torch.from_numpy(logits), 10).values[-1]))
    answer.choose()  # ... and handed to it, as BatchDecoder.step does
    for step in answer.steps:
        assert [(c.id, c.logit, c.prob, c.prob_after_filters) for c in step.top] == expected
    if opts.greedy:
        assert answer.generated == [1000, 1000]
