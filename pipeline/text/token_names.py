"""A tokenizer's ids -> readable text; control tokens keep their names ('<|im_end|>')."""
from __future__ import annotations

from pipeline.core.checks import token_ids
from pipeline.text.per_tokenizer import special_ids, vocab_size
from pipeline.text.readable import piece_text


def token_text(tokenizer, token_id: int) -> str:
    """Readable text of one token id; special tokens keep their name ('<|im_end|>')."""
    token_id = token_ids("token_id", [token_id], vocab_size(tokenizer))[0]
    piece = tokenizer.convert_ids_to_tokens([token_id])[0]
    return piece if token_id in special_ids(tokenizer) else piece_text(piece)


def tokens_text(tokenizer, ids) -> list[str]:
    """token_text for many ids at once."""
    special = special_ids(tokenizer)
    ids = token_ids("token_ids", ids, vocab_size(tokenizer))
    pieces = tokenizer.convert_ids_to_tokens(ids)
    return [p if int(i) in special else piece_text(p) for i, p in zip(ids, pieces)]
