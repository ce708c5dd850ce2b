"""Draft tokens from the text so far (prompt lookup, an n-gram speculator): no second model.

Take the last n tokens of the context, find the latest earlier place where the same n tokens appear with k
tokens after them (else the first place: the most tokens after it), and propose the tokens that followed.
Longer n first (3, then 2, then 1): a longer match is a better guess. When the answer repeats or quotes the
prompt, these guesses are often right; when it says something new they are mostly wrong, and checking them
costs little (see verify.py).

    prompt_lookup([5, 6, 7, 8, 5, 6], k=2)  # [7, 8]: "5 6" appeared before, followed by 7 8

This is transformers' `prompt_lookup_num_tokens` idea (its PromptLookupCandidateGenerator takes the first
match; this takes the latest with k tokens after it, which follows a text that repeats itself with changes;
in a loop the copy just one turn back would have too few tokens after it).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

MAX_NGRAM = 3  # the longest tail looked up
MIN_NGRAM = 1  # the shortest


def prompt_lookup(context: Sequence[int], k: int, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> list[int]:
    """Up to k tokens that followed the latest earlier copy (with k tokens after it, else the first copy) of the
    context's last n tokens (n from max_ngram down to min_ngram); [] when no tail appears earlier, or k is 0."""
    ids = np.asarray(context, dtype=np.int64)
    T = len(ids)
    for n in range(min(max_ngram, T - 1), min_ngram - 1, -1):
        if k <= 0:
            break
        windows = np.lib.stride_tricks.sliding_window_view(ids[:T - 1], n)  # (T-n, n): every earlier n-gram
        starts = np.flatnonzero((windows == ids[T - n:]).all(axis=1))  # where the tail appeared before
        if len(starts):
            full = starts[starts + n + k <= T]  # copies followed by k whole tokens
            begin = int(full[-1] if len(full) else starts[0]) + n  # the latest such copy, else the first
            return ids[begin:begin + k].tolist()
    return []
