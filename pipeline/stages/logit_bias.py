"""A logit bias typed as text ('13:-100, 42:2.5'): read, written back, and checked against the model's vocabulary.

The request keeps the bias as (token id, bias) pairs (`GenerationOptions.logit_bias`, checked by
`logit_bias_pairs` in pipeline/stages/request.py); the sidebar, a link and the command line type it here.
"""
from __future__ import annotations

import math

from pipeline.core.checks import in_vocabulary, shown, typed_count
from pipeline.core.errors import InputError
from pipeline.stages.request import (
    LOGIT_BIAS_LIMIT,
    MAX_LOGIT_BIAS_ENTRIES,
    MAX_TOKEN_ID,
    GenerationOptions,
    check_text,
    logit_bias_pairs,
)

LOGIT_BIAS_CHARS = 20 * MAX_LOGIT_BIAS_ENTRIES  # the typed form's length ('262143:-99.5, ' is 14)


def logit_bias_text(bias) -> str:
    """((13, -100.0), (42, 2.5)) -> '13:-100, 42:2.5' (what the sidebar, the CLI and a link show)."""
    return ", ".join(f"{i}:{b:g}" for i, b in logit_bias_pairs(bias))


def parse_logit_bias(text: str) -> tuple[tuple[int, float], ...]:
    """'13:-100, 42:2.5' (commas or spaces between entries) -> ((13, -100.0), (42, 2.5)); '' -> ()."""
    text = check_text("logit_bias", text, LOGIT_BIAS_CHARS)
    pairs = []
    for item in text.replace(",", " ").split():
        token, sep, bias = item.partition(":")
        if not sep or not token.isascii() or not token.isdigit():
            raise InputError("logit_bias", f"{shown(item)} must be TOKEN_ID:BIAS, e.g. 13:-100.")
        try:
            value = float(bias)
        except ValueError:
            raise InputError("logit_bias", f"{shown(item)}: the bias must be a number from -100 to 100.") from None
        if not math.isfinite(value) or abs(value) > LOGIT_BIAS_LIMIT:  # '9' * 5000 reads as inf: say what was typed
            raise InputError("logit_bias", f"the bias of token {shown(token)} must be from -{LOGIT_BIAS_LIMIT} to "
                                           f"{LOGIT_BIAS_LIMIT}, got {shown(bias)}.")
        pairs.append((typed_count("logit_bias", token, "a token id", MAX_TOKEN_ID), value))
    return logit_bias_pairs(pairs)


def check_vocabulary(options: GenerationOptions, vocab_size: int) -> None:
    """A logit bias names token ids: each must be one of the model's V (checked once the model is known)."""
    in_vocabulary("logit_bias", [i for i, _ in options.logit_bias], vocab_size)
