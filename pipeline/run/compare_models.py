"""One chat request through two (or more) models, side by side: what each one makes of it.

    result = compare_models(ChatRequest.from_question("Are tomatoes fruit?"), [smollm2, gemma])
    result.runs[0].answer, result.runs[1].kv.per_token_bytes, result.ttft.verdict("SmolLM2", "Gemma")

Each model's record (`ModelRun`) comes from its own captured run (pipeline.run.trace): the prompt its chat
format writes, its tokens, the first token's top candidates, the greedy answer, KV bytes read from the real
cache tensors. Speed (TTFT, TPOT) is measured on the plain serving path, the models interleaved
(A, B, A, B, ...) and repeated, as medians and ranges (pipeline.core.timing). The two models do different work
(their own prompt length, layers and widths), so the timing comes with `work_differs`: the numbers that make
the work differ, to be said next to any verdict. `compare_models_steps` is the same work as a long job of
short chunks (pipeline.core.long_jobs): one model's run, then one timed answer of one model, each a chunk.
Plain Python: no Streamlit, no HTML.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.core.errors import InputError
from pipeline.core.long_jobs import Progress, Steps, run_to_end
from pipeline.core.timing import Comparison, compare_runs
from pipeline.model.dims import FULL, SLIDING, ModelDims
from pipeline.model.interface import LanguageModel
from pipeline.model.registry import resolve
from pipeline.stages.decode_record import FinishReason
from pipeline.stages.request import ChatRequest
from pipeline.stages.tokens import Token
from pipeline.text.counts import plural

TOP_CANDIDATES = 5  # first-token candidates kept per model
TIMING_TOKENS = 16  # answer tokens generated per timed run (TPOT needs a few steps; more costs every repeat)


@dataclass(frozen=True)
class Candidate:
    text: str  # readable token text (untrusted: escape before showing)
    token_id: int
    prob: float  # softmax over the whole vocabulary at temperature 1


@dataclass(frozen=True)
class KVFootprint:
    """What one token costs in the KV cache. per_layer_bytes[i] = 2 (K and V) * Hkv * Dh * bytes per value,
    by formula; measured_per_layer_bytes[i] = the cache's real tensor bytes in layer i after the prompt,
    divided by the positions that layer really holds (a sliding layer keeps at most window - 1)."""

    per_layer_bytes: tuple[int, ...]  # (L,)
    measured_per_layer_bytes: tuple[float, ...]  # (L,) from the real cache after prefill
    windows: tuple[int | None, ...]  # (L,) positions each layer keeps; None: all of them
    prompt_tokens: int

    @property
    def per_token_bytes(self) -> int:
        """While the sequence is shorter than every window: every layer adds its share."""
        return sum(self.per_layer_bytes)

    def bytes_at(self, tokens: int) -> int:
        """Bytes the cache holds after `tokens` positions: a sliding layer stops growing at its window."""
        from pipeline.model.kv_tensors import held_positions  # that module reads torch caches: torch loads with it

        return sum(b * held_positions(w, tokens) for b, w in zip(self.per_layer_bytes, self.windows))

    @property
    def long_run_per_token_bytes(self) -> int:
        """What each further token adds once every window is full: the full layers' share only."""
        return sum(b for b, w in zip(self.per_layer_bytes, self.windows) if w is None)


@dataclass(frozen=True)
class AttentionKinds:
    full_layers: int
    sliding_layers: int
    window: int | None  # positions a sliding layer reaches (itself included)
    H: int
    Hkv: int

    @property
    def group(self) -> int:
        return self.H // self.Hkv

    @property
    def sharing(self) -> str:
        """'multi-query' (one K/V head for all), 'grouped-query' or 'multi-head' (one K/V head per query head)."""
        if self.Hkv == 1 and self.H > 1:
            return "multi-query"
        return "multi-head" if self.Hkv == self.H else "grouped-query"


@dataclass(frozen=True)
class ModelRun:
    key: str
    display_name: str
    instruct: bool | None
    note: str
    prompt_format: str  # the request's: "chat" (the model's chat format) or "plain"
    template_text: str  # the prompt exactly as the model reads it
    tokens: tuple[Token, ...]  # the prompt's tokens (ids and readable pieces)
    first_candidates: tuple[Candidate, ...]
    answer: str
    answer_tokens: int
    finish_reason: FinishReason
    kv: KVFootprint
    attention: AttentionKinds
    dims: ModelDims
    parameters: int
    embedding_parameters: int
    answer_ids: tuple[int, ...] = ()  # the answer's token ids (a run stored before they were kept: none)

    @property
    def template_tokens(self) -> int:
        return len(self.tokens)

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]


@dataclass(frozen=True)
class ModelTiming:
    ttft: Comparison  # a = the first model, b = the second; seconds
    tpot: Comparison | None  # None when an answer had a single token (no decode step to time)
    work_differs: tuple[str, ...]  # what makes the two models' work differ, in words


@dataclass(frozen=True)
class ModelComparison:
    request: ChatRequest
    runs: tuple[ModelRun, ...]
    timing: ModelTiming | None  # None when not measured (repeats=0)


def kv_footprint(dims: ModelDims, measured_bytes: list[int], prompt_tokens: int) -> KVFootprint:
    """KV bytes per token per layer, by formula and read from the cache's real tensors after the prompt."""
    from pipeline.model.kv_tensors import held_positions

    windows = tuple(dims.window(i) for i in range(dims.L))
    per_layer = tuple(2 * dims.Hkv * dims.Dh * dims.bytes_per_value for _ in range(dims.L))
    measured = tuple(b / max(held_positions(w, prompt_tokens), 1) for b, w in zip(measured_bytes, windows))
    return KVFootprint(per_layer, measured, windows, prompt_tokens)


def attention_kinds(dims: ModelDims) -> AttentionKinds:
    kinds = [dims.layer_type(i) for i in range(dims.L)]
    return AttentionKinds(kinds.count(FULL), kinds.count(SLIDING), dims.sliding_window, dims.H, dims.Hkv)


def parameter_counts(lm: LanguageModel) -> tuple[int, int]:
    """(all parameters, those in the input embedding table), counted on the loaded network."""
    model = lm.model
    total = sum(p.numel() for p in model.parameters())
    return total, int(model.get_input_embeddings().weight.numel())


def model_run(request: ChatRequest, lm: LanguageModel, max_prompt_tokens: int | None = None) -> ModelRun:
    """One model's record of `request`, from its captured run."""
    from pipeline.run.trace import run_trace

    trace = run_trace(request, lm, max_prompt_tokens)
    spec = _spec_of(lm)
    first = trace.steps[0].top[:TOP_CANDIDATES]
    total, embedding = parameter_counts(lm)
    return ModelRun(
        key=spec.key if spec else lm.name, display_name=spec.display_name if spec else lm.name,
        instruct=spec.instruct if spec else None, note=spec.note if spec else "",
        prompt_format=request.prompt_format, template_text=trace.prompt_text, tokens=tuple(trace.tokens),
        first_candidates=tuple(Candidate(c.text, c.id, c.prob) for c in first),
        answer=trace.text, answer_tokens=trace.usage.completion_tokens, finish_reason=trace.finish_reason,
        kv=kv_footprint(trace.dims, trace.prefill.kv_bytes_per_layer, len(trace.ids)),
        attention=attention_kinds(trace.dims), dims=trace.dims, parameters=total, embedding_parameters=embedding,
        answer_ids=tuple(trace.generated_token_ids))


def _spec_of(lm: LanguageModel):
    """The registry's record of lm, or None for a model it does not know (a test's tiny model)."""
    try:
        return resolve(lm.name)
    except InputError:
        return None


def work_differences(a: ModelRun, b: ModelRun) -> tuple[str, ...]:
    """The differences in work that a speed comparison of a and b must be read with."""
    out = []
    if a.template_tokens != b.template_tokens:
        out.append(f"the prompt is {a.template_tokens:,} tokens for {a.display_name} and {b.template_tokens:,} "
                   f"for {b.display_name} (their own templates and vocabularies)")
    if (a.dims.L, a.dims.D) != (b.dims.L, b.dims.D):
        out.append(f"{a.dims.L} layers of width {a.dims.D} vs {b.dims.L} of width {b.dims.D}")
    if a.parameters != b.parameters:
        out.append(f"{a.parameters / 1e6:,.0f}M vs {b.parameters / 1e6:,.0f}M parameters "
                   f"({a.embedding_parameters / 1e6:,.0f}M vs {b.embedding_parameters / 1e6:,.0f}M of them in the "
                   "embedding table, which a token only looks up a row of)")
    if a.dims.V != b.dims.V:
        out.append(f"the last step scores {a.dims.V:,} vs {b.dims.V:,} vocabulary entries for every token")
    if a.attention.sliding_layers != b.attention.sliding_layers:
        out.append(f"{a.attention.sliding_layers} vs {b.attention.sliding_layers} layers attend over a sliding window")
    return tuple(out)


def _timed_answers(request: ChatRequest, lms: list[LanguageModel], repeats: int, steps: int,
                   max_prompt_tokens: int | None, done: int, total: int):
    """TTFT and TPOT (seconds) of each model on the plain serving path, interleaved model by model and repeated,
    a timed answer per chunk (progress counted on from `done` of `total`): ([ttfts per model], [tpots per model]);
    a model whose answer had one token has no TPOTs."""
    from pipeline.faster.fast_path import generate

    options = replace(request.options, max_new_tokens=min(steps, request.options.max_new_tokens))
    short = replace(request, options=options)
    ttfts: list[list[float]] = [[] for _ in lms]
    tpots: list[list[float]] = [[] for _ in lms]
    for r in range(repeats):
        for i, lm in enumerate(lms):
            answer = generate(lm, short, max_prompt_tokens)
            ttfts[i].append(answer.ttft_s)
            if answer.tpot_s is not None:
                tpots[i].append(answer.tpot_s)
            done += 1
            yield Progress(done, total, f"{_name(lm)} timed, run {r + 1} of {repeats}")
    return ttfts, tpots


def compare_models(request: ChatRequest, lms: list[LanguageModel], repeats: int = 3,
                   max_prompt_tokens: int | None = None) -> ModelComparison:
    """`request` through each of `lms` (a record each) and, for two models and repeats > 0, their speed
    measured interleaved on the plain path (a = lms[0], b = lms[1])."""
    return run_to_end(compare_models_steps(request, lms, repeats, max_prompt_tokens))


def compare_models_steps(request: ChatRequest, lms: list[LanguageModel], repeats: int = 3,
                         max_prompt_tokens: int | None = None) -> Steps[ModelComparison]:
    """compare_models as a long job: the models are checked now, then each model's run is a chunk, and each
    timed answer of one model another."""
    if not lms:
        raise InputError("models", "give at least one model to run.")
    return _compare_chunks(request, list(lms), repeats, max_prompt_tokens)


def _compare_chunks(request: ChatRequest, lms: list[LanguageModel], repeats: int, max_prompt_tokens: int | None):
    timed = len(lms) == 2 and repeats > 0
    total = len(lms) + (repeats * len(lms) if timed else 0)
    runs = []
    for lm in lms:
        runs.append(model_run(request, lm, max_prompt_tokens))
        yield Progress(len(runs), total, f"{runs[-1].display_name} answered")
    timing = None
    if timed:
        ttfts, tpots = yield from _timed_answers(request, lms, repeats, TIMING_TOKENS, max_prompt_tokens,
                                                 len(runs), total)
        tpot = compare_runs(*tpots) if all(tpots) else None
        timing = ModelTiming(compare_runs(*ttfts), tpot, work_differences(*runs))
    return ModelComparison(request, tuple(runs), timing)


def _name(lm: LanguageModel) -> str:
    spec = _spec_of(lm)
    return spec.display_name if spec else lm.name


def _ending(run: ModelRun, limit: int) -> str:
    if run.finish_reason == FinishReason.LENGTH:
        return f"it did not stop by itself: the {limit}-token limit cut it"
    if run.finish_reason == FinishReason.EOS:
        return f"it stopped by itself after {plural(run.answer_tokens, 'token')}, with its end token"
    return f"it ended after {plural(run.answer_tokens, 'token')} ({run.finish_reason})"


def answers_sentence(comparison: ModelComparison) -> str:
    """One plain paragraph on why the answers to the same request differ (instruct vs base, how each ended)."""
    limit = comparison.request.options.max_new_tokens
    parts = []
    for run in comparison.runs:
        plain = comparison.request.prompt_format == "plain"
        if run.instruct:
            kind = ("was tuned on chat turns (instruct); here it gets bare text with no turns to answer" if plain
                    else "was tuned on chat turns (instruct): it reads the turns as a question put to it")
        elif run.instruct is False:
            kind = ("is a base model: it was only trained to continue text" if plain else
                    "is a base model: it was only trained to continue text, never to take turns, so it treats "
                    "the prompt as a document to carry on")
        else:
            kind = "is a local model whose tuning is not known"
        parts.append(f"{run.display_name} {kind}; {_ending(run, limit)}.")
    if comparison.request.prompt_format == "plain":
        parts.append("Here both read the plain text with no turn markers, which is what a base model was "
                     "trained on.")
    elif any(r.instruct is False for r in comparison.runs):
        parts.append("A base model shines at continuing text: try plain text with the start of a sentence.")
    return " ".join(parts)
