"""Speculative decoding measured against plain greedy decoding on one request: the answer (the same tokens both
ways, checked on every timed run), each verify pass's drafts accepted and rejected, the acceptance rate, and
TPOT both ways, interleaved and repeated (pipeline.core.timing: medians and ranges, no ratio when they overlap).

    run = measure(lm, ChatRequest.from_question("Repeat this text: ..."), k=8)
    run.acceptance, run.tokens_per_pass, run.timing.verdict("speculative", "plain")

A plain record (ints, strings, floats): a page or the CLI shows it without torch (imported only to measure).
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.errors import InputError
from pipeline.core.timing import Comparison, interleave
from pipeline.faster.speculative.rounds import Round
from pipeline.model.interface import LanguageModel
from pipeline.stages.request import ChatRequest
from pipeline.text.token_names import tokens_text

DEFAULT_DRAFTS = 8  # drafts checked per pass: a pass over 9 tokens costs about one over 1 on a CPU (weights read once)
REPEATS = 3  # timed runs each way, interleaved


@dataclass(frozen=True)
class SpeculativeRun:
    k: int  # drafts checked per pass at most
    prompt_tokens: int
    generated: tuple[int, ...]
    text: str
    finish_reason: str
    rounds: tuple[Round, ...]  # one per verify pass (the last run's; every run drafts the same)
    token_texts: dict[int, str]  # readable text of every id in `generated` and in the drafts (untrusted)
    same_tokens: bool  # every speculative run chose plain greedy's tokens
    timing: Comparison  # TPOT: a = speculative, b = plain

    @property
    def drafted(self) -> int:
        return sum(len(r.drafts) for r in self.rounds)

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.rounds)

    @property
    def acceptance(self) -> float | None:
        """Share of the drafts the model agreed with; None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def passes(self) -> int:
        """Forward passes after the prompt's: one per verify round."""
        return len(self.rounds)

    @property
    def tokens_per_pass(self) -> float:
        """Answer tokens fed to the model per pass (plain decoding: 1)."""
        return (len(self.generated) - 1) / self.passes if self.passes else 1.0


def measure(lm: LanguageModel, request: ChatRequest, k: int = DEFAULT_DRAFTS, repeats: int = REPEATS,
            max_prompt_tokens: int | None = None) -> SpeculativeRun:
    """The request decoded plainly and speculatively (k drafts per pass), interleaved `repeats` times each."""
    from pipeline.faster import fast_path  # torch: only once something is measured

    if request.options.max_new_tokens < 2:
        raise InputError("max_new_tokens", "TPOT needs at least 2 answer tokens: ask for 2 or more.")
    plain_tokens, spec = [], []

    def plain() -> float | None:
        answer = fast_path.generate(lm, request, max_prompt_tokens)
        plain_tokens.append(answer.generated)
        return answer.tpot_s

    def speculative() -> float | None:
        spec.append(fast_path.generate_with(lm, request, max_prompt_tokens, speculate=k))
        return spec[-1][0].tpot_s

    plain()  # the answer's length first: one token only cannot be timed per token
    if len(plain_tokens[0]) < 2:
        raise InputError("question", "the answer is a single token, so there is no time per token to compare: "
                                     "ask for a longer answer.")
    timing = interleave(speculative, plain, repeats)
    answer, decoder = spec[-1]
    ids = sorted({*answer.generated, *(d for r in decoder.rounds for d in r.drafts)})
    return SpeculativeRun(k=k, prompt_tokens=decoder.prompt_len, generated=tuple(answer.generated), text=answer.text,
                          finish_reason=str(answer.finish_reason), rounds=tuple(decoder.rounds),
                          token_texts=dict(zip(ids, tokens_text(lm.tokenizer, ids))),
                          same_tokens=all(a.generated == plain_tokens[0] for a, _ in spec)
                          and all(p == plain_tokens[0] for p in plain_tokens),
                          timing=timing)
