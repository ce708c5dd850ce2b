"""What is computed once per tokenizer (its size, its special ids, a table over its vocabulary), kept
beside the tokenizer in a weak dictionary: nothing is written onto the tokenizer object, and an entry
goes when its tokenizer does."""
from __future__ import annotations

import threading
import weakref
from typing import Callable, TypeVar

T = TypeVar("T")

_memo: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {what: value}
_lock = threading.Lock()


def per_tokenizer(tokenizer, what: str, compute: Callable[[], T]) -> T:
    """`compute()` once per (tokenizer, what); later calls return the same value. A tokenizer that cannot be
    weakly referenced (or hashed) is computed for each call."""
    try:
        with _lock:
            found = _memo.get(tokenizer, {})
            if what in found:
                return found[what]
    except TypeError:
        return compute()
    value = compute()  # outside the lock: a vocabulary-wide table takes ~0.3 s; a race computes it twice
    with _lock:
        return _memo.setdefault(tokenizer, {}).setdefault(what, value)


def vocab_size(tokenizer) -> int:
    """Ids the tokenizer can name (added tokens included): 49,152 for SmolLM2. Computed once per tokenizer."""
    return per_tokenizer(tokenizer, "vocab_size", lambda: len(tokenizer))


def special_ids(tokenizer) -> frozenset[int]:
    """The ids of the tokenizer's control tokens (bos, eos, pad, ...). Computed once per tokenizer."""
    return per_tokenizer(tokenizer, "special_ids", lambda: frozenset(tokenizer.all_special_ids))
