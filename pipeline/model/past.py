"""What a prefill continues from when the prompt's first positions were computed before: their K/V (and, for a
captured run, their captured tensors), taken from the server's prefix cache (pipeline.prompt_cache.reuse).

    past = reuse.take(lm, ids, captured=True)     # Past(n=32, ...): positions 0-31 need not run again
    run = run_prefill(lm, ids, past=past)         # runs ids[32:] over past.cache; captures 0-31 from past.captures
    reuse.keep(lm, ids, run.kv_cache, run.prefill)

Shape letters: L layers, H query heads, Hkv key/value heads, Bs block size, D model width, Dh head width.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from pipeline.model.interface import LanguageModel

# Each captured Prefill field's positions axis (the attention's query axis; its key axis is cut at the block's end,
# all a position sees). hidden_states keeps its L+1 rows, the embeddings first.
POSITION_AXIS = {"embeddings": 0, "hidden_states": 1, "attn_out": 1, "mlp_out": 1, "q_rot": 2, "k_rot": 2, "v": 2,
                 "final_norm": 0, "attention": 2}


@dataclass(frozen=True)
class Past:
    """The first n prompt positions, computed by an earlier request and kept."""

    n: int  # positions reused (a whole number of blocks; 0: nothing)
    cache: object = None  # HF DynamicCache holding positions 0 .. n-1 of every layer (None when n is 0)
    captures: list[dict[str, np.ndarray]] = field(default_factory=list)  # per block in order: captures_at its positions


NOTHING = Past(0)


def captures_at(prefill, start: int, stop: int) -> dict[str, np.ndarray]:
    """Positions [start, stop) of every captured field of a Prefill, copied: embeddings (Bs, D), hidden_states
    (L+1, Bs, D), attn_out and mlp_out (L, Bs, D), q_rot (L, H, Bs, Dh), k_rot and v (L, Hkv, Bs, Dh), final_norm
    (Bs, D), attention (L, H, Bs, stop) when it was kept."""
    out = {}
    for name, axis in POSITION_AXIS.items():
        a = getattr(prefill, name)
        if a is None:
            continue
        index = [slice(None)] * a.ndim
        index[axis] = slice(start, stop)
        if name == "attention":
            index[3] = slice(0, stop)
        out[name] = np.ascontiguousarray(a[tuple(index)])
    return out


class Reuse(Protocol):
    """The server's prefix cache as the prefills use it (pipeline.prompt_cache.reuse.ServerReuse)."""

    def take(self, lm: LanguageModel, ids: list[int], captured: bool = False, keep_attention: bool = False) -> Past:
        """The K/V of the cached blocks `ids` starts with (a captured run: only blocks that kept captures, with
        their attention rows when it keeps attention)."""

    def keep(self, lm: LanguageModel, ids: list[int], kv_cache, prefill=None) -> str | None:
        """Keep the prompt's new full blocks from its KV cache (with the prefill's captures when given). Returns
        why nothing was kept, or None."""
