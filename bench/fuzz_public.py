"""Fuzz the public functions of pipeline/ that need no model: what raises something other than InputError?

    TPE_CACHE_DIR=... .venv/bin/python bench/fuzz_public.py [examples per function] [name filter]

Arguments are drawn from each parameter's annotation (numbers with NaN, infinities and huge values, empty
and odd-shaped arrays, text with lone surrogates, empty lists); the real tokenizer is passed where a
function takes one. Prints, per function, each distinct exception type with its smallest example found.
Functions that take the model, a cache, a prefill or a trace are left out (their inputs come from the
pipeline, not from people).
"""
from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import sys
import traceback

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pipeline
from pipeline.core.errors import InputError

SKIP_PARAMS = {"lm", "cache", "prefill", "trace", "model", "tree", "memo", "report", "r", "o", "side",
               "run_a", "run_b", "on_event", "log", "counter", "weight", "blocks", "device", "x_rot_t"}
SKIP_MODULES = ("pipeline.cli", "pipeline.__main__", "pipeline.model.loader", "pipeline.model.weights_cache",
                "pipeline.model.capture", "pipeline.model.decoders.plain", "pipeline.model.prefill",
                "pipeline.model.kv_tensors", "pipeline.model.hf_imports", "pipeline.server.store.disk")

numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**30, 10**30),
                    st.sampled_from([0, -1, 1, 0.0, float("nan"), float("inf"), 1e308, 2**63]))
ints = st.one_of(st.integers(-10, 100_000), st.integers(-10**30, 10**30),
                 st.sampled_from([0, -1, 2**63, 49_151, 49_152]))
texts = st.one_of(st.text(max_size=40), st.sampled_from(["", " ", "\ud800", "a\udfffb", "\x00", "🍅" * 3]))
arrays = st.one_of(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
               elements=st.floats(allow_nan=True, allow_infinity=True, width=64)),
    st.sampled_from([np.array([]), np.zeros((0, 3)), np.array([np.nan, 1.0]), np.array([1e308, 1e308])]))


def strategy_for(name: str, annotation: str, tokenizer):
    a = str(annotation).replace("'", "")
    if name == "tokenizer":
        return st.just(tokenizer)
    if name == "rng":
        return st.integers(0, 10).map(np.random.default_rng)
    if "ndarray" in a or name in ("x", "table", "unit", "coords", "vectors", "logits", "probs", "draws", "rows"):
        return arrays
    if a.startswith("list[float]"):
        return st.lists(numbers, max_size=6)
    if a.startswith("list[int]") or name in ("ids", "positions", "shifts", "distances", "chosen_ids",
                                             "allowed_ids", "context_ids"):
        return st.lists(ints, max_size=6)
    if a.startswith("list[list[int]]"):
        return st.lists(st.lists(ints, max_size=4), max_size=3)
    if a in ("int", "int | None"):
        return ints
    if a.startswith("float"):
        return numbers
    if a in ("str", "str | None"):
        return texts
    if a == "bytes":
        return st.binary(max_size=12)
    if a == "bool":
        return st.booleans()
    if "GenerationOptions" in a:
        from pipeline.stages.request import GenerationOptions
        return st.builds(GenerationOptions, max_new_tokens=st.integers(1, 8),
                         temperature=st.sampled_from([0.0, 0.7, 2.0]), top_k=st.sampled_from([0, 1, 5]),
                         top_p=st.sampled_from([0.01, 0.5, 1.0]), min_p=st.sampled_from([0.0, 0.5, 1.0]))
    if "ModelShape" in a:
        from pipeline.stages.kv_cache import ModelShape
        size = st.integers(1, 256)  # ModelShape checks itself (a test covers that); here: fit's other inputs
        return st.builds(ModelShape, name=texts, params_b=st.floats(0, 1e3), layers=size, heads=size,
                         kv_heads=size, head_dim=size, context=st.integers(1, 10**6), sliding_layers=st.just(0),
                         sliding_window=st.integers(0, 10**6))
    if a.startswith("dict"):
        return st.dictionaries(texts, st.one_of(numbers, texts, st.dictionaries(texts, numbers, max_size=3)),
                               max_size=3)
    return st.one_of(numbers, texts, st.lists(numbers, max_size=3), st.none())


def public_functions(name_filter: str = ""):
    for info in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
        if info.name.startswith(SKIP_MODULES):
            continue
        module = importlib.import_module(info.name)
        for name, fn in list(vars(module).items()):
            if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != info.name:
                continue
            if name_filter and name_filter not in f"{info.name}.{name}":
                continue
            params = inspect.signature(fn).parameters
            if SKIP_PARAMS & set(params) or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values()):
                continue
            yield f"{info.name}.{name}", fn


def fuzz(fn, tokenizer, examples: int) -> dict[str, str]:
    params = inspect.signature(fn).parameters
    args = st.fixed_dictionaries({n: strategy_for(n, p.annotation, tokenizer) for n, p in params.items()
                                  if p.default is inspect.Parameter.empty or n in ("k", "n", "base")})
    found: dict[str, str] = {}

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(args)
    def run(kwargs):
        try:
            fn(**kwargs)
        except InputError:
            pass
        except Exception as e:  # noqa: BLE001 - collecting what escapes
            key = type(e).__name__
            text = repr(kwargs)
            if key not in found or len(text) < len(found[key]):
                frame = traceback.extract_tb(e.__traceback__)[-1]
                found[key] = f"{text[:300]} -> {str(e)[:120]} ({os.path.basename(frame.filename)}:{frame.lineno})"

    run()
    return found


def main() -> None:
    import resource

    # a huge count must fail as MemoryError here, not take the machine's memory (the OOM killer ends the run)
    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, resource.RLIM_INFINITY))
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    name_filter = sys.argv[2] if len(sys.argv) > 2 else ""
    from pipeline.model.weights_cache import load_tokenizer, weights_cache_dir

    tokenizer = load_tokenizer(weights_cache_dir())
    total = n_fns = 0
    for name, fn in public_functions(name_filter):
        n_fns += 1
        found = fuzz(fn, tokenizer, examples)
        total += len(found)
        for kind, example in found.items():
            print(f"{name}: {kind}: {example}")
    print(f"{total} distinct exceptions other than InputError over {n_fns} functions")


if __name__ == "__main__":
    main()
