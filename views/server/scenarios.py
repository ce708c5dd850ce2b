"""Prompt-caching scenarios played on the model through the queue, once per cache folder (or room's Redis).

Each returns the scenario's rows: one plain record per request (blocks hit and missed, timings), as
`pipeline.prompt_cache.playback.play_scenario` makes them.
"""
from __future__ import annotations

import hashlib
import time

from pipeline.model.interface import LanguageModel
from views.server.state import get_model, result_store
from views.server.waiting import model_result_key, result_through_queue, submit_result


def scenario_key(name: str, block_size: int = 16) -> tuple:
    """Where scenario `name`'s rows are stored (before views.server.waiting.model_result_key adds the model): its name,
    the block size and a digest of its requests, so rows kept on disk or in Redis from an earlier version of the
    scenario's text are not shown for the new one."""
    from pipeline.prompt_cache.scenarios import scenarios

    digest = hashlib.sha256(repr(scenarios()[name].prompts).encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return ("scenario", name, block_size, digest)


def scenario_rows(name: str, block_size: int = 16) -> list[dict]:
    """The rows of scenario `name` played on the model: played once, in the queue, then stored
    (in this server's memory, and on disk or in the room's Redis: views.server.state.result_store)."""
    return result_through_queue(scenario_key(name, block_size),
                                lambda: play_scenario_now(get_model(), name, block_size), 4000)


def submit_scenario(name: str, block_size: int = 16):
    """scenario_rows's ticket, not waited for (a lesson's prompt-caching stage, prepared at start)."""
    return submit_result(scenario_key(name, block_size), lambda: play_scenario_now(get_model(), name, block_size), 4000)


def scenario_rows_timed_again(name: str, block_size: int = 16) -> list[dict]:
    """The rows of scenario `name` played again now, stored in place of the old ones for everyone on this
    server. At most once a minute per scenario: visitors asking in the same minute share one replay."""
    minute = int(time.time() // 60)

    def work() -> list[dict]:
        rows = play_scenario_now(get_model(), name, block_size)
        result_store().put(model_result_key(scenario_key(name, block_size)), rows)
        return rows

    # kept under the minute's key: a later click in that minute reads it
    return result_through_queue(("scenario again", name, block_size, minute), work, 4000)


def prompt_cache_conversation(block_size: int = 16) -> list[dict]:
    """The rows of the "conversation" scenario (Presenter mode's prompt-caching screen)."""
    return scenario_rows("conversation", block_size)


def play_scenario_now(lm: LanguageModel, name: str, block_size: int = 16) -> list[dict]:
    """The rows of scenario `name` played on `lm` now (neither queued nor stored).
    Imported when it runs, in the queue's thread: the first page's script never waits on torch's import."""
    from pipeline.prompt_cache.playback import play_scenario
    from pipeline.prompt_cache.scenarios import scenarios

    return play_scenario(lm, scenarios()[name], block_size)
