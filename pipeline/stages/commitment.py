"""Where each answer token was decided: the first layer from which the logit lens keeps it through the last layer.

Answer token j (chosen at decode step j) was predicted from the residual stream at sequence position T - 1 + j
(T prompt tokens). The logit lens reads that stream after every layer (pipeline.stages.layers.lens_head: the final
norm, the head, any soft-capping) and asks where the chosen token stands. "Keeps it" has no single meaning, so
three definitions are computed side by side, a choice of definition and not a fact about the model:

  top1    the token is the lens's top-1 (no other token scored strictly higher: a tie at the top counts)
  top3    fewer than 3 other tokens scored strictly higher
  p_half  its probability under the lens is over 0.5

Layers are numbered as HF's `hidden_states` index: 0 the embeddings, i the output of block i, L the last layer
(before the final norm, which the lens applies). A token's layer is the first l with the definition holding at
every layer l..L; L when it holds at the last layer only; None when it does not hold even there (a sampled or
forced token the model did not rank first, say).

The decode steps keep no per-layer stream, so `answer_commitment` runs the model once more over the prompt and the
answer with hooks on every block: the prompt's first T - 1 tokens through the KV cache without hooks (in chunks,
as the prefill does; the blocks the server's prefix cache holds of them are read, not run again), then the S
positions that predicted the answer's tokens in one pass, captured.

Shape letters: L layers, S answer tokens, D model width, V vocabulary, k the lens's best tokens kept.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.model.interface import LanguageModel
from pipeline.model.past import NOTHING, Reuse

DEFINITIONS = {  # key (the JSON's) -> how the page names it
    "top1": "top-1 from then on",
    "top3": "in the top 3 from then on",
    "p_half": "probability over 0.5 from then on",
}
TOP3 = 3
LENS_TOP = 3  # the lens's best tokens kept per layer and answer token (the strip's table shows them)


def definition_holds(ranks: np.ndarray, probs: np.ndarray) -> dict[str, np.ndarray]:
    """ranks (L+1, S): other tokens the lens scored strictly higher than the answer's token; probs (L+1, S) its
    probability -> {definition: (L+1, S) bool}."""
    return {"top1": ranks == 0, "top3": ranks < TOP3, "p_half": probs > 0.5}


def settled_layers(holds: np.ndarray) -> list[int | None]:
    """(L+1, S) bool -> per token the first layer from which it holds through the last; None where the last
    layer does not hold.  [[F, T], [T, F], [T, T]] -> [1, 2];  [[T], [F]] -> [None]."""
    L1, S = holds.shape
    out: list[int | None] = []
    for j in range(S):
        column = holds[:, j]
        if not column[-1]:
            out.append(None)
            continue
        failing = np.flatnonzero(~column)  # layers where it does not hold; the last such one bounds it
        out.append(int(failing[-1]) + 1 if failing.size else 0)
    return out


def commitment_layers(ranks: np.ndarray, probs: np.ndarray) -> dict[str, list[int | None]]:
    """{definition: per answer token its layer (or None)} from the lens's ranks and probabilities (L+1, S)."""
    return {name: settled_layers(h) for name, h in definition_holds(ranks, probs).items()}


@dataclass(frozen=True)
class Commitment:
    """The logit lens at the positions that predicted the answer's tokens, and where each token settled."""

    token_ids: list[int]  # (S,) the answer's tokens
    ranks: np.ndarray  # (L+1, S) other tokens the lens scored strictly higher than the answer's token
    probs: np.ndarray  # (L+1, S) the answer's token's probability under the lens ([L]: the model's own at T = 1)
    top_ids: np.ndarray  # (L+1, S, LENS_TOP) the lens's best tokens at each position, best first
    top_probs: np.ndarray  # (L+1, S, LENS_TOP) their probabilities
    layers: dict[str, list[int | None]]  # definition -> (S,) layer, or None
    reused_positions: int = 0  # prompt positions whose K/V the pass read from the server's prefix cache

    def to_json(self) -> list[dict]:
        """[{"token_id", "top1", "top3", "p_half"}, ...], one entry per answer token."""
        return [{"token_id": int(t), **{name: self.layers[name][j] for name in DEFINITIONS}}
                for j, t in enumerate(self.token_ids)]


def answer_stream(lm: LanguageModel, prompt_ids: list[int], answer_ids: list[int],
                  reuse: Reuse | None = None) -> tuple[np.ndarray, int]:
    """((L+1, S, D) float32, reused positions): the residual stream after every layer at the S positions that
    predicted the answer's tokens (the last prompt token's, then every answer token's but the last), from one more
    pass of the model. reuse: the server's prefix cache; the prompt's cached first blocks are read, not run."""
    import torch

    from pipeline.model.capture import block_names, capture

    S, L = len(answer_ids), lm.dims.L
    if S == 0:
        return np.zeros((L + 1, 0, lm.dims.D), dtype=np.float32), 0
    prompt_ids = list(prompt_ids)
    past = reuse.take(lm, prompt_ids) if reuse is not None else NOTHING  # leaves the last prompt token to run
    rest = prompt_ids[past.n:-1]
    kv_cache = lm.forward_chunked(rest, past.cache)[1] if rest else past.cache
    names = ["embeddings", *block_names(L, "hidden_states")]
    with capture(lm, names, store_dtype=torch.float32) as seen:
        lm.forward([[prompt_ids[-1], *answer_ids[:-1]]], cache=kv_cache, logits_to_keep=1)  # (1, S)
    return np.stack([seen[n][0][0].numpy() for n in names]), past.n  # L+1 of (S, D)


def answer_lens(lm: LanguageModel, stream: np.ndarray, token_ids: list[int], k: int = LENS_TOP):
    """stream (L+1, S, D), token_ids (S,) -> (ranks (L+1, S) int, probs (L+1, S) float32, top ids (L+1, S, k),
    top probabilities (L+1, S, k)): each token under the lens at its own position, and the lens's best k there;
    one reading of the lens (pipeline.stages.layers.lens_chunks) for both."""
    import torch

    from pipeline.stages.layers import lens_chunks, top_tokens

    L1, S, _ = stream.shape
    tokens = torch.as_tensor(list(token_ids), dtype=torch.long).repeat(L1)[:, None]  # (L+1) x S, (rows, 1)

    def read(logits, log_z, rows):  # (n, V), (n, 1)
        own = logits.gather(1, tokens[rows])  # (n, 1)
        return (logits > own).sum(-1), torch.exp(own - log_z)[:, 0], *top_tokens(logits, log_z, k)

    chunks = lens_chunks(lm, stream, read)
    if not chunks:
        return (np.zeros((L1, S), dtype=np.int64), np.zeros((L1, S), dtype=np.float32),
                np.zeros((L1, S, k), dtype=np.int64), np.zeros((L1, S, k), dtype=np.float32))
    ranks, probs, top_ids, top_probs = (torch.cat(part).numpy() for part in zip(*chunks))
    return (ranks.reshape(L1, S), probs.reshape(L1, S), top_ids.reshape(L1, S, k), top_probs.reshape(L1, S, k))


def answer_commitment(lm: LanguageModel, prompt_ids: list[int], answer_ids: list[int],
                      reuse: Reuse | None = None) -> Commitment:
    """Where each token of the answer to `prompt_ids` was decided, by each definition (one more model pass, over
    the prompt's blocks in the server's prefix cache when `reuse` holds them)."""
    stream, reused = answer_stream(lm, prompt_ids, answer_ids, reuse)
    ranks, probs, top_ids, top_probs = answer_lens(lm, stream, answer_ids)
    return Commitment(list(map(int, answer_ids)), ranks, probs, top_ids, top_probs, commitment_layers(ranks, probs),
                      reused)
