"""OpenAI's logprobs from a captured run: each chosen token's log-probability under the model's own scores at that
step (log-softmax of the captured logits, before temperature, penalties and filters), and the best alternatives."""
from __future__ import annotations

import numpy as np

from pipeline.core.maths import top_indices

from pipeline.text.byte_level import piece_bytes
from pipeline.text.per_tokenizer import special_ids


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(S, V) scores -> (S, V) log-probabilities, in float64."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes a token stands for (a control token: its name)."""
    name = tokenizer.convert_ids_to_tokens(int(token_id))
    return name.encode("utf-8") if token_id in special_ids(tokenizer) else piece_bytes(name)


def _entry(tokenizer, token_id: int, logprob: float) -> dict:
    raw = token_bytes(tokenizer, token_id)
    return {"token": raw.decode("utf-8", errors="replace"), "logprob": float(logprob), "bytes": list(raw)}


def content_logprobs(tokenizer, step_logits: np.ndarray, chosen: list[int], top: int, answer_steps: int) -> list[dict]:
    """[{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}] for the answer's first `answer_steps`
    tokens (the end token the model chose last is not part of the text, as in OpenAI's answers)."""
    rows = log_softmax(step_logits[:answer_steps])  # (answer_steps, V)
    out = []
    for row, token in zip(rows, chosen[:answer_steps]):
        best = top_indices(row, top) if top else []
        out.append({**_entry(tokenizer, token, row[token]),
                    "top_logprobs": [_entry(tokenizer, int(t), row[t]) for t in best]})
    return out
