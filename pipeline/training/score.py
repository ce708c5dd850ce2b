"""Teacher forcing: the probability the model gave each true next token of a text, in one pass.

The text is its own exercise sheet: shifted by one token, it gives the expected answer at every
position. For ids [a, b, c] the pass reads a, b, c at once and position t's logits are the guess
for token t + 1 (the causal mask hides what comes after):

    logprob[b] = log softmax(logits[0])[b],  logprob[c] = log softmax(logits[1])[c]
    loss = -mean(logprob[1:])  (nats; what HF's `model(ids, labels=ids).loss` returns)
    perplexity = exp(loss);  surprisal = -logprob / ln 2  (bits)

The first token has no logprob: nothing came before it.
"""
from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipeline.core.errors import InputError
from pipeline.stages.request import ChatRequest, check_text

if TYPE_CHECKING:
    from pipeline.model.interface import LanguageModel

MAX_SCORE_CHARS = 20_000  # what the page and the CLI accept; the token limit is the model's context window
ALLOWED_CONTROLS = "\n\t\r"  # line breaks and tabs are text; other control characters are refused


@dataclass(frozen=True)
class Score:
    """One text scored under teacher forcing. Index t is token t of `ids`; index 0 has no prediction."""

    ids: list[int]  # (T,) the scored sequence (a question's templated prompt first when `scored_from` > 1)
    logprobs: list[float | None]  # (T,) ln p(ids[t] | ids[:t]); None where t < scored_from
    ranks: list[int | None]  # (T,) 1 = the model's top choice
    top_ids: list[int | None]  # (T,) the token the model preferred at t (its argmax)
    top_probs: list[float | None]  # (T,)
    scored_from: int = 1  # first token scored: 1 for a text, len(prompt) for an answer to a question

    @property
    def scored(self) -> range:
        return range(self.scored_from, len(self.ids))

    @property
    def mean_loss(self) -> float:
        """Mean cross-entropy in nats over the scored tokens."""
        return -float(np.mean([self.logprobs[t] for t in self.scored]))

    @property
    def perplexity(self) -> float:
        return math.exp(self.mean_loss)

    def prob(self, t: int) -> float:
        return math.exp(self.logprobs[t])

    def surprisal_bits(self, t: int) -> float:
        return -self.logprobs[t] / math.log(2)

    def to_json(self) -> dict:
        """{"ids", "tokens": [{"id", "logprob", "rank", "top_id"}], "mean_loss", "perplexity", "scored_from"}."""
        return {"ids": list(self.ids),
                "tokens": [{"id": i, "logprob": lp, "rank": r, "top_id": top}
                           for i, lp, r, top in zip(self.ids, self.logprobs, self.ranks, self.top_ids)],
                "mean_loss": self.mean_loss, "perplexity": self.perplexity, "scored_from": self.scored_from}


def check_score_text(field: str, text) -> str:
    """Text to score: Unicode, not empty, at most MAX_SCORE_CHARS, no control characters but line breaks and tabs."""
    text = check_text(field, text, MAX_SCORE_CHARS)
    if not text.strip():
        raise InputError(field, "give some text to score.")
    for i, ch in enumerate(text):
        if unicodedata.category(ch) == "Cc" and ch not in ALLOWED_CONTROLS:
            raise InputError(field, f"holds the control character {ch.encode('unicode_escape').decode()} at "
                                    f"position {i}; remove it (line breaks and tabs are fine).")
    return text


def check_length(lm: LanguageModel, ids: list[int], field: str, limit: int | None = None) -> list[int]:
    """At least two tokens (one to read, one to guess) and at most the context window (or `limit`)."""
    most = min(lm.dims.context_window, limit or lm.dims.context_window)
    if len(ids) < 2:
        raise InputError(field, f"is {len(ids)} token; scoring needs at least two (one to read, one to guess).")
    if len(ids) > most:
        raise InputError(field, f"is {len(ids):,} tokens; at most {most:,} fit "
                                f"({'the context window' if most == lm.dims.context_window else 'the limit here'}).")
    return ids


def text_ids(lm: LanguageModel, text: str, limit: int | None = None) -> list[int]:
    """The text's ids as the tokenizer writes them (Gemma's adds <bos> in front; SmolLM2's adds nothing)."""
    text = check_score_text("text", text)
    return check_length(lm, list(lm.tokenizer(text)["input_ids"]), "text", limit)


def answer_ids(lm: LanguageModel, question: str, answer: str, prompt_format: str = "chat",
               limit: int | None = None) -> tuple[list[int], int]:
    """(prompt + answer ids, len(prompt)): the answer's tokens placed after the templated question, where
    the model's own answer would start (the generation prompt's last marker)."""
    from pipeline.stages.tokens import tokenize_request

    question = check_score_text("question", question)
    answer = check_score_text("answer", answer)
    request = ChatRequest.from_question(question, prompt_format=prompt_format)
    prompt = [t.id for t in tokenize_request(lm.tokenizer, request).tokens]
    ids = prompt + list(lm.tokenizer(answer, add_special_tokens=False)["input_ids"])
    return check_length(lm, ids, "answer", limit), len(prompt)


def score_ids(lm: LanguageModel, ids: list[int], scored_from: int = 1) -> Score:
    """One pass over ids (1, T) through the model's door (its lock and pass count) -> each token's
    log-probability given the ones before it, its rank and what the model preferred."""
    check_length(lm, ids, "text")
    if not 1 <= scored_from < len(ids):
        raise InputError("scored_from", f"must be within 1..{len(ids) - 1}, got {scored_from}.")
    out = lm.forward([ids], use_cache=False, logits_to_keep=0)
    return score_logits(out.logits[0], ids, scored_from)


def score_logits(logits, ids: list[int], scored_from: int = 1) -> Score:
    """logits (T, V) of one pass over ids -> the Score. Log-softmax in float32, as HF's loss computes it."""
    import torch

    logp = torch.log_softmax(logits[:-1].float(), dim=-1)  # (T-1, V): position t guesses token t + 1
    target = torch.as_tensor(ids[1:], device=logp.device)  # (T-1,)
    true_logp = logp.gather(1, target[:, None])[:, 0]  # (T-1,)
    ranks = 1 + (logp > true_logp[:, None]).sum(dim=1)  # (T-1,) tokens strictly more likely, plus one
    top_logp, top_id = logp.max(dim=1)  # (T-1,)
    skip, keep = [None] * scored_from, slice(scored_from - 1, None)
    return Score(list(ids), skip + true_logp[keep].tolist(), skip + ranks[keep].tolist(),
                 skip + top_id[keep].tolist(), skip + top_logp[keep].exp().tolist(), scored_from)


def article_penalty(p: float) -> float:
    """The loss of one token the model gave probability p: -ln p. The article's 54 % -> 0.62, 5 % -> 3.00."""
    if not 0 < p <= 1:
        raise InputError("probability", f"must be in (0, 1], got {p}.")
    return -math.log(p)
