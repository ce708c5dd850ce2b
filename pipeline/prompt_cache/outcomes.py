"""What happened to one block of a prompt in the prefix cache: the four outcomes the engine reports and
the page draws (torch-free, so a page can name them before the model has loaded)."""

HIT, MISS, NOT_CACHEABLE = "hit", "miss", "not cacheable"
RECOMPUTED = "cached, recomputed"  # a cached last block run again: the model must see the last prompt token


def blocks_not_kept(n_tokens: int, held: int) -> str | None:
    """Why the server's prefix cache keeps no block of an n-token prompt whose KV cache holds only `held` positions in
    some layer (a sliding layer past its window: HF keeps its last window - 1, pipeline.model.dims.held_positions),
    or None when every layer holds every position."""
    if held >= n_tokens:
        return None
    return (f"not kept: this prompt ({n_tokens:,} tokens) is longer than the model's sliding window, whose layers "
            f"keep only their last {held:,} positions; the prefix cache stores every position of every layer.")
