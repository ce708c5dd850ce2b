"""One server's parts wired together: the queue with its two step engines, the store of finished runs, the
store of other results and the file of speed verdicts. The app (views/server/state.py) and the benches
(bench/room_cpu.py, bench/long_job_wait.py) build them here, so a bench measures the server as it runs.

    queue = server_queue(lambda request: lm, max_prompt_tokens=4096, on_trace=runs.put)
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Hashable

from pipeline.model.interface import LanguageModel
from pipeline.server.kv_budget import KVBudget, kv_budget
from pipeline.server.run_queue import RunQueue
from pipeline.server.store.memory import RunStore, deep_size
from pipeline.server.store.shared import results_store, runs_store
from pipeline.server.store.verdict_file import VerdictFile
from pipeline.server.trace_engine import StreamEngine, TraceEngine
from pipeline.stages.request import ChatRequest

RESULT_MAX_BYTES = 256 * 2**20  # the results store beside the runs (a branch's trace holds arrays too)


def log_queue_on_console() -> None:
    """The queue's log (each request's wait, prefill and first token; each whole job) on the server's console."""
    queue_log = logging.getLogger("pipeline.server.run_queue")
    if not queue_log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        queue_log.addHandler(handler)
        queue_log.setLevel(logging.INFO)


# The API's streams' share of the model's time while other requests are in the batch (pipeline.server.kind_shares):
# each stream steps on a decoder of its own, a pass each, where the pages' requests share one pass. 8 streamed API
# answers beside 8 learners made the learners' pages ~2.5x as slow; a quarter keeps them within ~4/3 per step.
API_STREAM_SHARE = 0.25


def server_queue(lm_for: Callable[[ChatRequest], LanguageModel], max_prompt_tokens: int,
                 on_trace: Callable[[Hashable, object], None] | None = None, finish_inline: bool = False,
                 budget: KVBudget | None = None) -> RunQueue:
    """The one line in front of the model. Chat requests (captured runs: "trace"; a page's live stream: "stream"; the
    API's streams: "api", the same engine with a bounded share of the model's time beside the others) are
    scheduled per decode step (pipeline.server.run_queue, pipeline.server.trace_engine). Each ended run's record
    is assembled and handed to on_trace on a thread of its own (the batch steps on meanwhile), or in the
    queue's own thread with finish_inline. budget: the KV bytes the batch may reserve (default: kv_budget on the
    device the models load on: the fixed budget on a CPU, the free memory less a margin on CUDA). Both engines serve
    through one prefix cache (pipeline.prompt_cache.reuse): a prompt's cached first blocks are not run again."""
    from pipeline.model.loader import pick_device  # torch: not at import
    from pipeline.prompt_cache.reuse import ServerReuse

    if budget is None:
        device = pick_device()
        budget = kv_budget(device, stored_weights_bytes() if str(device).startswith("cuda") else 0)
    logging.getLogger("pipeline.server.run_queue").info("admission: %s", budget.describe())
    finisher = None if finish_inline else ThreadPoolExecutor(max_workers=1, thread_name_prefix="finish-runs")
    reuse = ServerReuse()
    return RunQueue(engines={"trace": TraceEngine(lm_for, max_prompt_tokens, on_trace=on_trace, finisher=finisher,
                                                  reuse=reuse),
                             "stream": StreamEngine(lm_for, max_prompt_tokens, reuse=reuse),
                             "api": StreamEngine(lm_for, max_prompt_tokens, reuse=reuse)},
                    kv_budget_bytes=budget.bytes, shares={"api": API_STREAM_SHARE})


def stored_weights_bytes() -> int:
    """The bytes of the registry's models' converted weights (their files in the weights cache, float32 as loaded):
    what the models will take on the device once loaded. The queue is built before they load, so on CUDA its
    budget keeps them out of the free memory it measures (a model not converted yet counts nothing)."""
    from pipeline.model.registry import MODELS
    from pipeline.model.weights_cache import weights_cache_dir

    return sum(f.stat().st_size for spec in MODELS.values() if weights_cache_dir(spec).is_dir()
               for f in weights_cache_dir(spec).glob("*.safetensors"))


def finished_runs(cache: Path) -> RunStore:
    """Finished runs: the hot ones in memory (1.2 GB of arrays at most), all of them on disk under cache/runs
    (4 GB) or, with TPE_STORE=redis://..., in the room's Redis. A folder that cannot be written or a Redis that
    does not answer is skipped (memory only)."""
    return RunStore(disk=runs_store(cache / "runs"))


def other_results(cache: Path, is_shared_key: Callable[[Hashable], bool]) -> RunStore:
    """Results of other model runs, 256 MB at most in memory by their real size; those is_shared_key picks are
    kept behind it on disk under cache/results (or in the room's Redis)."""
    return RunStore(max_bytes=RESULT_MAX_BYTES, size_of=deep_size, disk=results_store(is_shared_key, cache / "results"))


def speed_verdicts(cache: Path) -> VerdictFile:
    """Every speed verdict shown, dated, in cache/verdicts.json: a restart and the other servers sharing the folder
    find them (pipeline.server.store.verdict_file)."""
    return VerdictFile(cache / "verdicts.json")
