"""Names from transformers, resolved one thread at a time.

transformers builds its namespace lazily: the first `from transformers import X` in a process
swaps in a lazy module and imports X's submodule on demand. Two threads doing that at once (the
network loading in the background while the warm-up imports the prompt cache) fail with
"ImportError: cannot import name 'X' from 'transformers'" (seen here both ways round; a test
repeats it). Every import of transformers in pipeline/ goes through `transformers_names`, and the
loading of a model or tokenizer holds the same lock (`transformers_lock`), since it imports more
of transformers as it goes.

    DynamicCache, = transformers_names("DynamicCache")
"""
from __future__ import annotations

import threading

transformers_lock = threading.RLock()


def transformers_names(*names: str) -> list:
    with transformers_lock:
        import transformers

        return [getattr(transformers, name) for name in names]
