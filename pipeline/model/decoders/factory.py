"""Which decoder runs a model's plain path: the one that computes exactly what its HF model does."""
from __future__ import annotations

from pipeline.model.decoders.gemma import GemmaPlainDecoder, supports_gemma
from pipeline.model.decoders.graphed import GraphedDecoder
from pipeline.model.decoders.plain import HFDecoder, PlainDecoder, supports
from pipeline.model.interface import LanguageModel
from pipeline.model.weight_formats import weights_of


def open_decoder(lm: LanguageModel, max_positions: int):
    """PlainDecoder where it is exact for lm's model (Llama), GemmaPlainDecoder for Gemma 3, else HFDecoder
    (the same interface). On CUDA a Llama's float weights decode through GraphedDecoder (its step a CUDA graph)."""
    if supports(lm.model):
        if captures_graphs(lm):
            return GraphedDecoder(lm, max_positions)
        return PlainDecoder(lm, max_positions)
    return GemmaPlainDecoder(lm, max_positions) if supports_gemma(lm.model) else HFDecoder(lm)


def captures_graphs(lm: LanguageModel) -> bool:
    """Whether the plain decode step runs as a captured CUDA graph: float weights (not int8) on a CUDA device."""
    return lm.model.get_input_embeddings().weight.device.type == "cuda" and weights_of(lm.model) != "int8"
