"""What happened to one block of a prompt in the prefix cache: the four outcomes the engine reports and
the page draws (torch-free, so a page can name them before the model has loaded)."""

HIT, MISS, NOT_CACHEABLE = "hit", "miss", "not cacheable"
RECOMPUTED = "cached, recomputed"  # a cached last block run again: the model must see the last prompt token
