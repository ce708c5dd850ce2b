"""The tokenizer's vocabulary alone: id -> token name, and which ids are special. Enough to draw a
stored run's tokens (pipeline.text reads only these two), read straight from the folder's
tokenizer.json with the `tokenizers` library (~0.1 s), where the full transformers tokenizer
takes ~1.5 s to import and load. It answers exactly like the full one (tested over every id).

    vocab = Vocabulary.from_folder(folder)
    vocab.convert_ids_to_tokens([19, 2])   # ['#', '<|im_end|>']
    vocab.all_special_ids                  # [1, 2, 0] for SmolLM2: bos, eos (= pad), unk
"""
from __future__ import annotations

import json
from pathlib import Path

# The special-token roles a transformers tokenizer knows, in its own order (`all_special_ids`).
SPECIAL_ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class Vocabulary:
    def __init__(self, tokenizer, special_ids: list[int]):
        self._tokenizer = tokenizer  # a tokenizers.Tokenizer
        self.all_special_ids = special_ids

    @classmethod
    def from_folder(cls, folder: Path, extra: tuple[str, ...] = ()) -> "Vocabulary":
        """extra: tokens named special when loaded (pipeline.model.registry's turn_tokens), listed last as there."""
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        config_file = Path(folder) / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.exists() else {}
        names = [config.get(role) for role in SPECIAL_ROLES]
        extra_named = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
        names += list(extra_named.values()) if isinstance(extra_named, dict) else list(extra_named)
        names += list(extra)
        ids: list[int] = []
        for name in names:
            name = name.get("content") if isinstance(name, dict) else name
            token_id = tokenizer.token_to_id(name) if isinstance(name, str) else None
            if token_id is not None and token_id not in ids:
                ids.append(token_id)
        return cls(tokenizer, ids)

    def __len__(self) -> int:  # as len() of a transformers tokenizer: every id it can name
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self._tokenizer.id_to_token(int(i)) for i in ids]
