"""Stored runs are pickles, which name each class by its module. The December 2026 relayout moved modules
(pipeline/trace.py to pipeline/run/, the cost maths to pipeline/costs/, ...); runs stored before it still load:
`load` and `loads` read an old module name as the new one. Nothing else changes in what a pickle may name."""
from __future__ import annotations

import io
import pickle

# old module -> new module (a package's submodules follow it)
MOVED_MODULES = {
    "pipeline.errors": "pipeline.core.errors",
    "pipeline.checks": "pipeline.core.checks",
    "pipeline.maths": "pipeline.core.maths",
    "pipeline.files": "pipeline.core.files",
    "pipeline.timing": "pipeline.core.timing",
    "pipeline.long_jobs": "pipeline.core.long_jobs",
    "pipeline.trace_engine": "pipeline.server.trace_engine",
    "pipeline.compare": "pipeline.run.compare_models",
    "pipeline.path_comparison": "pipeline.run.compare_paths",
    "pipeline.run_queue": "pipeline.server.run_queue",
    "pipeline.room_schedule": "pipeline.server.room_schedule",
    "pipeline.room": "pipeline.server.room",
    "pipeline.serving.costs": "pipeline.costs.pass_costs",
    "pipeline.serving": "pipeline.costs",
    "pipeline.speed.formats": "pipeline.faster.formats",
    "pipeline.speculative": "pipeline.faster.speculative",
    "pipeline.stages.fast_path": "pipeline.faster.fast_path",
    "pipeline.model.plain_decoder": "pipeline.model.decoders.plain",
    "pipeline.model.gemma_decoder": "pipeline.model.decoders.gemma",
}
# classes that left their module when it was split: (old module, name) -> new module
MOVED_NAMES = {
    **{("pipeline.trace", n): "pipeline.run.record" for n in ("RequestRecord", "Timings", "Usage", "Cleanup", "Trace")},
    ("pipeline.stages.generation", "StreamDetokenizer"): "pipeline.text.stream_detokenizer",
    **{("pipeline.stages.generation", n): "pipeline.stages.batched_decoding" for n in ("BatchRow", "BatchDecoder")},
    ("pipeline.stages.generation", "CacheDecoder"): "pipeline.model.decoders.protocol",
}


def current_module(module: str, name: str) -> str:
    """Where a class a pickle names as module.name lives now."""
    if (module, name) in MOVED_NAMES:
        return MOVED_NAMES[(module, name)]
    if module == "pipeline.trace":
        return "pipeline.run.trace"
    for old in sorted(MOVED_MODULES, key=len, reverse=True):
        if module == old or module.startswith(old + "."):
            return MOVED_MODULES[old] + module[len(old):]
    return module


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        return super().find_class(current_module(module, name), name)


def load(file):
    return _Unpickler(file).load()


def loads(data: bytes):
    return _Unpickler(io.BytesIO(data)).load()
