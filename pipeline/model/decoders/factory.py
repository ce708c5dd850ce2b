"""Which decoder runs a model's plain path: the one that computes exactly what its HF model does."""
from __future__ import annotations

from pipeline.model.decoders.gemma import GemmaPlainDecoder, supports_gemma
from pipeline.model.decoders.plain import HFDecoder, PlainDecoder, supports
from pipeline.model.interface import LanguageModel


def open_decoder(lm: LanguageModel, max_positions: int):
    """PlainDecoder where it is exact for lm's model (Llama), GemmaPlainDecoder for Gemma 3, else HFDecoder
    (the same interface)."""
    if supports(lm.model):
        return PlainDecoder(lm, max_positions)
    return GemmaPlainDecoder(lm, max_positions) if supports_gemma(lm.model) else HFDecoder(lm)
