"""What the decode loop steps: the decoder protocols, and the captured path's decoder (HF's forward over a KV cache)."""
from __future__ import annotations

from typing import Protocol

import torch

from pipeline.model.interface import LanguageModel
from pipeline.model.kv_tensors import bytes_per_layer, cache_len


class Decoder(Protocol):
    """What the decode loop steps: one chosen token in, the (V,) scores for the next one out.
    The plain path's decoders (pipeline.model.decoders.plain) are this alone."""

    def step(self, token: int) -> torch.Tensor: ...


class RecordingDecoder(Decoder, Protocol):
    """A decoder whose KV cache use is recorded with each step (an Answer with record=True needs one)."""

    def usage(self) -> tuple[int, list[int]]:
        """(positions the KV cache holds, its bytes per layer (L,))."""


class CacheDecoder:
    """The captured path's decoder: HF's forward pass over a KV cache (hooks and all)."""

    def __init__(self, lm: LanguageModel, kv_cache):
        self.lm, self.kv_cache = lm, kv_cache

    def step(self, token: int) -> torch.Tensor:
        return self.lm.forward([[token]], cache=self.kv_cache).logits[0, -1]  # (1, 1) in: only the new token

    def usage(self) -> tuple[int, list[int]]:
        """(positions held, bytes per layer) of the KV cache."""
        return cache_len(self.kv_cache), bytes_per_layer(self.kv_cache)
