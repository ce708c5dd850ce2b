"""A fake step engine for the queue, and three requests checked against their runs alone."""
from kit.tolerance import agreed_steps, any_logit_tolerance, assert_within

from pipeline.core.errors import InputError
from pipeline.model.passes import note_pass


class FakeEngine:
    """payload: (name, tokens to make, prompt tokens, KV bytes). Each step every started request makes one
    token; a request ends after its `tokens`. `on_step(n)` runs inside step n (the test acts mid-batch)."""

    def __init__(self, on_step=None):
        self.live: dict[str, list] = {}  # name -> [tokens left, made]
        self.log: list = []  # ("start", name) / ("step", [names in it])
        self.on_step = on_step or (lambda n: None)
        self.steps = 0

    def reserve(self, payload):
        return payload[2], payload[3]

    def start(self, payload):
        name, tokens = payload[0], payload[1]
        if tokens < 0:
            raise InputError("messages", f"{name} is refused")
        note_pass()  # the prefill's forward pass, counted for its caller
        self.log.append(("start", name))
        self.live[name] = [tokens, []]
        return name

    def step(self):
        self.on_step(self.steps)
        self.log.append(("step", sorted(self.live)))
        ended = []
        for name, state in list(self.live.items()):
            state[1].append(self.steps)
            state[0] -= 1
            if state[0] == 0:
                ended.append((name, f"{name}:{len(state[1])}"))
                del self.live[name]
        self.steps += 1
        return ended


def three_requests():
    from pipeline.stages.request import ChatRequest, GenerationOptions

    return [ChatRequest.from_question("Hi", options=GenerationOptions(max_new_tokens=6)),
            ChatRequest.from_question("Are tomatoes fruit? Botanically, yes: a tomato is a fruit.",
                                      options=GenerationOptions(max_new_tokens=8, temperature=0.8, seed=3)),
            ChatRequest.from_question("Why?", options=GenerationOptions(max_new_tokens=3))]


def assert_alone_equal(lm, traces, requests):
    from pipeline.run.trace import run_trace

    for request, joined in zip(requests, traces):
        alone = run_trace(request, lm)
        # the same answer (unless a step's two best scores tie within rounding), each shared step's scores within
        # float32 rounding of a pass over that many positions (kit.tolerance)
        tol = any_logit_tolerance(lm, len(alone.ids) + len(alone.generated_token_ids))
        n = agreed_steps(joined.generated_token_ids, alone.generated_token_ids, alone.step_logits, tol, "joined")
        assert_within(joined.step_logits[:n], alone.step_logits[:n], tol, "step scores")
        assert [s.kv_cache_tokens for s in joined.steps[:n]] == [s.kv_cache_tokens for s in alone.steps[:n]]
        assert [s.kv_bytes_per_layer for s in joined.steps[:n]] == [s.kv_bytes_per_layer for s in alone.steps[:n]]


def staggered(lm, requests, join_at, static_batch: bool | None = None):
    """Each request started (prefilled) before step join_at[i] of one running TraceEngine batch, its results
    completed as the queue does; (the Traces in request order, the engine). static_batch: the engine's switch for
    the static batched step (None: its own choice, the CUDA graphs' step on CUDA only)."""
    from pipeline.server.trace_engine import TraceEngine

    engine, handles, results, step = TraceEngine(lambda r: lm, static_batch=static_batch), {}, {}, 0
    while len(results) < len(requests):
        for i, request in enumerate(requests):
            if join_at[i] == step:
                handles[engine.start((i, request, None))] = i
        results.update((handles[h], made.complete(None)) for h, made in engine.step())
        step += 1
    return [results[i] for i in range(len(requests))], engine
