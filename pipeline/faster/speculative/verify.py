"""The verify step of speculative decoding, as a decoder the one decode loop steps
(pipeline.stages.generation.stream_answer): it wraps a plain decoder (PlainDecoder, GemmaPlainDecoder).

Fed a token x, it drafts k tokens d1..dk after it (drafts.py) and runs x, d1..dk through the full model in ONE
pass over the KV cache (a mini-prefill: the weights are read once for k + 1 tokens). Row i of that pass's
logits is the model's own score for the token after position i, so the greedy choice after x is
argmax(row 0), after d1 argmax(row 1), ... The drafts are accepted up to the first one the model would not
have chosen; the cache is rolled back past the rest. The loop then chooses those accepted tokens one by one
as usual (the scores are ready: no pass), then the model's own token after the last accepted one, which the
next pass starts from. So the answer is greedy decoding's, token for token, and the loop's stop strings, end
tokens, stream and finish reasons apply unchanged: an answer that ends inside accepted drafts ends there.

Greedy only: a sampled answer would need the drafts accepted by probability (rejection sampling).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from pipeline.core.errors import InputError
from pipeline.faster.speculative.drafts import prompt_lookup
from pipeline.faster.speculative.rounds import Round, check_drafts
from pipeline.model.decoders.plain import rollback


class SpeculativeDecoder:
    """Steps like a plain decoder (`step(token) -> (V,) scores`), but checks up to k drafts with every pass."""

    def __init__(self, inner, k: int, prompt: Sequence[int],
                 draft: Callable[[Sequence[int], int], list[int]] = prompt_lookup):
        self.k = check_drafts(k)
        if not hasattr(inner, "run"):
            raise InputError("speculative", "speculative decoding runs on the plain decoders (Llama, Gemma 3); "
                                            "this model is decoded by Hugging Face's forward.")
        self.inner, self.draft = inner, draft
        self.context = list(prompt)  # the prompt and every token fed so far: what drafts are looked up in
        self.prompt_len = len(self.context)
        self.pending: list[tuple[int, torch.Tensor]] = []  # accepted drafts not yet chosen, with their next scores
        self.rounds: list[Round] = []

    @property
    def T(self) -> int:
        """Positions the cache holds (accepted drafts included)."""
        return self.inner.T

    def step(self, token: int) -> torch.Tensor:
        self.context.append(token)
        if self.pending:
            draft, scores = self.pending.pop(0)
            if draft == token:
                return scores  # an accepted draft: already in the cache, its next scores already computed
            rollback(self.inner, self.inner.T - len(self.pending) - 1)  # another token (forced): drop the drafts
            self.pending = []
        room = self.inner.keys.shape[3] - self.inner.T - 1  # positions left after this token's
        drafts = self.draft(self.context, min(self.k, room)) if room > 0 else []
        logits = self.inner.run([token, *drafts])  # (1 + n, V): one pass
        best = logits.argmax(-1).tolist()  # the model's greedy choice after each position
        accepted = 0
        while accepted < len(drafts) and best[accepted] == drafts[accepted]:
            accepted += 1
        if accepted < len(drafts):
            rollback(self.inner, self.inner.T - (len(drafts) - accepted))
        self.pending = [(drafts[i], logits[i + 1]) for i in range(accepted)]
        self.rounds.append(Round(len(self.context) - self.prompt_len - 1, token, tuple(drafts), accepted))
        return logits[0]
