"""Stage: tensors & batch. Several requests padded to one rectangle, as a server feeds the GPU."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.core.checks import integer, token_ids
from pipeline.core.errors import InputError

if TYPE_CHECKING:  # torch is imported where tensors are made, so the page imports without it
    import torch


def batch_tensors(sequences: list[list[int]], pad_id: int, left_pad: bool = True) -> dict[str, torch.Tensor]:
    """Pad token id lists to (B, T) tensors.

    [[5, 6, 7], [8, 9]] with pad 0, left padding ->
      input_ids      [[5, 6, 7], [0, 8, 9]]
      attention_mask [[1, 1, 1], [0, 1, 1]]
      position_ids   [[0, 1, 2], [0, 0, 1]]   (each request counts its own positions from 0)
    Left padding keeps every request's last real token in the last column, where the next token is read.
    """
    import torch

    if not sequences:
        raise InputError("sequences", "give at least one sequence of token ids.")
    pad_id = integer("pad_id", pad_id, 0, 2**31 - 1)
    sequences = [token_ids("sequences", seq, 2**31) for seq in sequences]
    B, T = len(sequences), max(len(s) for s in sequences)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((B, T), dtype=torch.long)  # (B, T) 1 = real token, 0 = padding
    for b, seq in enumerate(sequences):
        cols = slice(T - len(seq), T) if left_pad else slice(0, len(seq))
        input_ids[b, cols] = torch.tensor(seq, dtype=torch.long)
        attention_mask[b, cols] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
    return {"input_ids": input_ids, "position_ids": position_ids, "attention_mask": attention_mask}


def describe(tensors: dict[str, torch.Tensor]) -> dict[str, dict]:
    """JSON-ready view: values, shape and dtype of each tensor."""
    return {
        name: {"values": t.tolist(), "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
        for name, t in tensors.items()
    }


def pad_token_text(tokenizer) -> str:
    """Readable text of the padding token ('<|im_end|>' for SmolLM2)."""
    from pipeline.text.token_names import token_text

    return token_text(tokenizer, tokenizer.pad_token_id)


def decode_step_tensors(n_cached: int, token_id: int) -> dict:
    """What one decode step feeds the model once `n_cached` positions sit in the KV cache.

    n_cached=5, token 42 -> input_ids [[42]], position_ids [[5]], attention_mask [[1]*6]: one new
    token, but the mask covers the cached positions too.
    """
    n_cached, token_id = integer("n_cached", n_cached, 0, 2**20), integer("token_id", token_id, 0, 2**31 - 1)
    return {"input_ids": [[token_id]], "position_ids": [[n_cached]], "attention_mask": [[1] * (n_cached + 1)],
            "input_shape": [1, 1], "past_token_count": n_cached}


def padding_share(sequences: list[list[int]]) -> tuple[int, int]:
    """(padding cells, all cells) of the (B, T) rectangle: [[1, 2, 3], [4]] -> (2, 6)."""
    if not sequences:
        raise InputError("sequences", "give at least one sequence of token ids.")
    total = len(sequences) * max(len(s) for s in sequences)
    return total - sum(len(s) for s in sequences), total
