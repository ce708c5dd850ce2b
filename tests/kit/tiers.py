"""The tiers: a test asking for the real model is in the model tier; the fast tier refuses the real weights and
runs the tiny model on one thread (a pytest plugin)."""
import sys

import pytest

from kit.app_fixtures import _streamlit_caches
from kit.apptest import clear_streamlit_caches, lighter_apptest

TIERS = ("model", "app", "browser")


REAL_MODEL_FIXTURES = {"lm", "default_trace", "gemma_lm"}


def pytest_collection_modifyitems(config, items):
    """Safety net: a test that asks for the real model is in the `model` tier even if its mark was forgotten."""
    for item in items:
        if REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("model"):
            item.add_marker(pytest.mark.model)


@pytest.fixture(autouse=True)
def _apptest_costs():
    """lighter_apptest, once a test module has imported Streamlit's AppTest (a test that imports it in its body
    gets it from the next test on)."""
    if "streamlit.testing.v1" in sys.modules:
        lighter_apptest()


@pytest.fixture(autouse=True)
def _fast_tier(request, monkeypatch):
    """In the fast tier (no tier marker) loading the real weights is an error, not a slow test; and the
    tiny model runs on one thread (its matrices are too small to share, and on a busy 2-core machine
    threads waiting for each other cost more than the maths)."""
    if any(request.node.get_closest_marker(tier) for tier in TIERS):
        if _streamlit_caches["tiny"]:  # an AppTest on the real model after ones on the tiny model
            clear_streamlit_caches()
            _streamlit_caches["tiny"] = False
        yield
        return
    import torch

    from pipeline.model import loader

    def refuse(*_args, **_kwargs):
        raise AssertionError("a fast-tier test tried to load the model weights: mark it `model`")

    refuse.real = loader.load_model  # for a CLI run in-process (tests/kit/cli.py), whose weights cache is unusable
    monkeypatch.setattr(loader, "load_model", refuse)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
