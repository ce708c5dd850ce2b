"""Prompt-caching scenarios played on the model, once per server, through the queue (plain records)."""
from __future__ import annotations

import time

from pipeline.model.interface import LanguageModel
from views.server_state import get_model, result_store
from views.waiting import queued


def played(key: str, block_size: int = 16) -> list[dict]:
    """A prompt-caching scenario played on the model (plain records), once per server, in the queue."""
    return queued(("scenario", key, block_size), lambda: _play(get_model(), key, block_size), 4000)


def played_again(key: str, block_size: int = 16) -> list[dict]:
    """Play a scenario again now and keep it in place of the stored one, for everyone on this server.
    At most once a minute per scenario: visitors asking in the same minute share one replay."""
    minute = int(time.time() // 60)

    def work() -> list[dict]:
        rows = _play(get_model(), key, block_size)
        result_store().put(("scenario", key, block_size), rows)
        return rows

    return queued(("scenario again", key, block_size, minute), work, 4000)  # kept: a later click that minute reads it


def prompt_cache_conversation(block_size: int = 16) -> list[dict]:
    return played("conversation", block_size)


def _play(lm: LanguageModel, name: str, block_size: int = 16) -> list[dict]:
    """Imported when it runs, in the queue's thread: the first page's script never waits on torch's import."""
    from pipeline.prompt_cache.playback import play
    from pipeline.prompt_cache.scenarios import scenarios

    return play(lm, scenarios()[name], block_size)
