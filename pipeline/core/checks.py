"""Checks at the door of a public function: each returns the clean value or raises InputError naming the
field, so NaN, 10**30, an empty array or a lone surrogate never reaches numpy, torch or a tokenizer.

    number("gpu_gib", float("nan"))  -> InputError("gpu_gib: must be a finite number, got nan.")
    array("logits", [])              -> InputError("logits: is empty: give at least one value.")
    typed_count("force", "9" * 5000, "the step", 63) -> InputError("force: the step must be at most 63, got ...")
"""
from __future__ import annotations

import math

import numpy as np

from pipeline.core.errors import InputError


def is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_finite(x) -> bool:
    """A real number a float can hold: 10**400 is refused here rather than overflowing later."""
    if not isinstance(x, (int, float, np.integer, np.floating)) or isinstance(x, (bool, np.bool_)):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def number(field: str, x, lo: float | None = None, hi: float | None = None) -> float:
    """A finite real number within [lo, hi]."""
    if not is_finite(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise InputError(field, f"must be a finite number{_range(lo, hi)}, got {x!r}.")
    return float(x)


def integer(field: str, x, lo: int | None = None, hi: int | None = None) -> int:
    """A whole number within [lo, hi] (not a bool, not 2.0)."""
    if not is_int(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise InputError(field, f"must be a whole number{_range(lo, hi)}, got {x!r}.")
    return int(x)


def typed_count(field: str, text: str, what: str, hi: int) -> int:
    """A whole number typed as text, from 0 to `hi`: ' 42' -> 42. ASCII digits only: '²' and '١٢' pass str.isdigit but
    int() refuses or rereads them; '-1', '+1' and '1e3' are refused. The digits are counted before int() reads them,
    since int() raises ValueError past 4,300 digits: '9' * 5000 is refused like any number past `hi`."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        raise InputError(field, f"{what} must be a whole number from 0 to {hi:,}, got {shown(text)}.")
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(hi)) or int(digits) > hi:
        raise InputError(field, f"{what} must be at most {hi:,}, got {shown(text)}.")
    return int(digits)


def shown(text: str, limit: int = 24) -> str:
    """What a user typed, quoted in a message: 'abc' -> "'abc'"; a longer text is cut, its length said:
    '9' * 5000 -> "'999999999999999999999999…' (5,000 characters)"."""
    text = str(text)
    return repr(text) if len(text) <= limit else f"{text[:limit] + '…'!r} ({len(text):,} characters)"


def array(field: str, x, ndim: int | None = None, dtype=np.float64, min_len: int = 1) -> np.ndarray:
    """An array of numbers with `ndim` axes (any number >= 1 when None), each at least `min_len` long."""
    try:
        a = np.asarray(x, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        raise InputError(field, "must be an array of numbers.") from None
    if dtype is None and a.dtype.kind not in "biuf":
        raise InputError(field, "must be an array of numbers.")
    if (ndim is None and a.ndim == 0) or (ndim is not None and a.ndim != ndim):
        raise InputError(field, f"must have {ndim or 'at least 1'} axes, got shape {a.shape}.")
    if min(a.shape) < min_len:
        raise InputError(field, f"is empty (shape {a.shape}): give at least {min_len} value per axis.")
    return a


def token_ids(field: str, ids, vocab_size: int) -> list[int]:
    """Whole numbers in 0..vocab_size-1."""
    try:
        ids = list(ids)
    except TypeError:
        raise InputError(field, "must be a list of token ids.") from None
    if not all(is_int(i) and 0 <= i < vocab_size for i in ids):
        bad = next(i for i in ids if not (is_int(i) and 0 <= i < vocab_size))
        raise InputError(field, f"token ids must be whole numbers from 0 to {vocab_size - 1:,}, got {bad!r}.")
    return [int(i) for i in ids]


def in_vocabulary(field: str, ids, vocab_size: int) -> None:
    """Token ids a request names (a logit bias's, `trace --force`'s), each one of the model's V: checked once the
    model is known, after their type was."""
    bad = [i for i in ids if i >= vocab_size]
    if bad:
        raise InputError(field, f"token id {bad[0]:,} is past the vocabulary (V = {vocab_size:,}: ids 0 to "
                                f"{vocab_size - 1:,}).")


def _range(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" from {lo:,} to {hi:,}"
    if lo is not None:
        return f" of at least {lo:,}"
    return f" of at most {hi:,}" if hi is not None else ""
