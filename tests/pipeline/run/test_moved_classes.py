"""Runs stored before the relayout (pickles naming pipeline.trace.Trace, pipeline.serving..., ...) still load from
the disk and Redis stores: pipeline/server/store/moved_classes.py reads an old module name as the new one (fast tier:
the tiny model's run)."""
import pickle
import sys
import types
import zlib

import pytest

from pipeline.run.record import Trace
from pipeline.run.trace import run_trace
from pipeline.server.store import moved_classes
from pipeline.server.store.disk import DiskStore
from pipeline.server.store.redis_store import HEADER, decode
from pipeline.stages.request import ChatRequest, GenerationOptions


def pickled_under(obj, old_module: str) -> bytes:
    """obj pickled as a program from before the relayout wrote it: every class of its class's module (the Trace
    and its records) named as old_module.<name>."""
    new_module = sys.modules[type(obj).__module__]
    classes = [c for c in vars(new_module).values() if isinstance(c, type) and c.__module__ == new_module.__name__]
    fake = types.ModuleType(old_module)
    for cls in classes:
        setattr(fake, cls.__name__, cls)
        cls.__module__ = old_module
    sys.modules[old_module] = fake
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        for cls in classes:
            cls.__module__ = new_module.__name__
        del sys.modules[old_module]


@pytest.fixture(scope="module")
def trace(tiny_lm):
    return run_trace(ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=3)),
                     tiny_lm)


def test_an_old_pickle_names_the_old_module_and_plain_pickle_cannot_load_it(trace):
    old = pickled_under(trace, "pipeline.trace")
    assert b"pipeline.trace" in old and b"pipeline.run.record" not in old
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(old)


def test_a_trace_stored_before_the_relayout_loads_as_the_new_class(trace):
    loaded = moved_classes.loads(pickled_under(trace, "pipeline.trace"))
    assert type(loaded) is Trace and loaded.to_json() == trace.to_json()


def test_the_disk_and_redis_stores_read_old_runs(trace, tmp_path):
    store = DiskStore(tmp_path)
    store.put("k", {"x": 1})
    store.path("k").write_bytes(pickled_under(trace, "pipeline.trace"))
    assert store.get("k").to_json() == trace.to_json()
    old_value = HEADER + zlib.compress(pickled_under(trace, "pipeline.trace"))  # as the Redis store keeps it
    assert decode(old_value).to_json() == trace.to_json()


@pytest.mark.parametrize("old,name,new", [
    ("pipeline.trace", "Trace", "pipeline.run.record"),
    ("pipeline.trace", "_Started", "pipeline.run.trace"),
    ("pipeline.serving.sweep", "Point", "pipeline.costs.sweep"),
    ("pipeline.serving.costs", "PassCost", "pipeline.costs.pass_costs"),
    ("pipeline.speculative.measure", "X", "pipeline.faster.speculative.measure"),
    ("pipeline.stages.generation", "Answer", "pipeline.stages.generation"),
    ("pipeline.stages.generation", "BatchDecoder", "pipeline.stages.batched_decoding"),
    ("numpy", "ndarray", "numpy"),
])
def test_each_old_module_maps_to_where_its_classes_live_now(old, name, new):
    assert moved_classes.current_module(old, name) == new
