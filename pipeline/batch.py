"""Batch tensors: several requests padded to one rectangle, as a server would feed the GPU."""
from __future__ import annotations

import torch


def batch_tensors(sequences: list[list[int]], pad_id: int, left_pad: bool = True) -> dict[str, torch.Tensor]:
    """Pad token id lists to (B, T) tensors.

    [[5, 6, 7], [8, 9]] with pad 0, left padding ->
      input_ids      [[5, 6, 7], [0, 8, 9]]
      attention_mask [[1, 1, 1], [0, 1, 1]]
      position_ids   [[0, 1, 2], [0, 0, 1]]   (each request counts its own positions from 0)
    Left padding keeps every request's last real token in the last column, where the next token is read.
    """
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


def batched_last_logits(lm, sequences: list[list[int]]) -> torch.Tensor:
    """Run a padded batch once; returns (B, V) next-token scores of each request."""
    t = {k: v.to(lm.device) for k, v in batch_tensors(sequences, lm.tokenizer.pad_token_id).items()}
    with torch.inference_mode(), lm.lock:
        out = lm.model(**t, use_cache=False, logits_to_keep=1)
        lm.calls += 1
    return out.logits[:, -1].float().cpu()
