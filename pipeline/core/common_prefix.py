"""How long a start two sequences share, written once: the prompt cache's blocks (token ids in its engine, token bytes
in the audit's radix tree, block text in its traps), where patching's clean and corrupted prompts part
(pipeline.attribution), where a run's answer leaves another's (temperature 0 in a batch, a weight format against fp32).
"""
from __future__ import annotations


def common_prefix_len(a, b) -> int:
    """Leading items a and b share: characters of a str, bytes of a bytes, items of a list.

        common_prefix_len("tomato", "tomb") -> 3;  common_prefix_len([1, 2, 3], [1, 2]) -> 2

    Equal starts cost one comparison; otherwise a binary search over slice equality (a str or bytes
    slice compares as one memcmp, much faster than a Python loop over a long prompt).
    A list and a tuple compare item by item: [1, 2] and (1, 2, 5) share 2.
    """
    if type(a) is not type(b):
        a, b = tuple(a), tuple(b)  # else [1] == (1,) is False and nothing would match
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n - 1  # items known equal; most that can still be
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def first_difference(a, b) -> int | None:
    """The first index where two sequences differ, a shorter one differing where it ends; None where they are equal.

        first_difference([1, 2, 3], [1, 5, 3]) -> 1;  first_difference([1, 2], [1, 2, 4]) -> 2;  ([1, 2], (1, 2)): None
    """
    n = common_prefix_len(a, b)
    return None if n == len(a) == len(b) else n
