"""A process's start-up (model load, CUDA's first-call set-up) apart from a first request's TTFT
(pipeline.model.warm_up): the CLI reports both, a server's background load warms CUDA (nothing on a CPU)."""
import json
import time

import pytest
import torch
from kit.cli import run_cli

from pipeline.model import loader
from pipeline.model.warm_up import warm_cuda, warm_up

LOAD_TAKES_S = 100.0  # what the faked clock says the model load took


def test_trace_json_reports_start_up_apart_from_a_ttft_that_leaves_the_load_out(tmp_path, tiny_app_model,
                                                                                monkeypatch):
    """The clock jumps 100 s while the model loads (a fake clock, no waiting): `startup_s` holds those 100 s and
    the warm-up, and the request's TTFT, timed from its arrival after the start-up, none of them."""
    from pipeline.model.weights_cache import weights_cache_dir

    root, _lm = tiny_app_model
    real_clock, real_load = time.perf_counter, loader.load_model
    shift = [0.0]

    def slow_load(*args, **kwargs):
        lm = getattr(real_load, "real", real_load)(*args, **kwargs)
        shift[0] += LOAD_TAKES_S
        return lm

    monkeypatch.setattr(time, "perf_counter", lambda: real_clock() + shift[0])
    monkeypatch.setattr(loader, "load_model", slow_load)
    out = tmp_path / "trace.json"
    code, printed, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--max-new-tokens", "2", "--json",
                                 str(out), "--model", str(root / weights_cache_dir().name))
    assert code == 0, err
    j = json.loads(out.read_text())
    assert LOAD_TAKES_S <= j["startup_s"] < LOAD_TAKES_S + 60
    assert 0 < j["timings"]["ttft_s"] < LOAD_TAKES_S  # the request's own: arrival to its first token
    assert "start-up" in printed and "not in TTFT" in printed


def test_warm_up_runs_one_uncounted_pass_and_a_server_warms_only_cuda(tiny_lm):
    """warm_up runs the network once (a forward hook sees it) without counting a request's pass; warm_cuda, what a
    server runs as it starts, does nothing on a CPU."""
    calls = []
    hook = tiny_lm.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        before = tiny_lm.calls
        warm_up(tiny_lm)
        assert calls == [1] and tiny_lm.calls == before
        assert warm_cuda(tiny_lm) is False and calls == [1]  # on this CPU: nothing
    finally:
        hook.remove()


def test_a_servers_background_load_warms_the_model_it_loaded(tiny_lm, monkeypatch):
    """ModelHandle.start_loading (a server's start) hands the model it loaded to warm_cuda."""
    from pipeline.model import warm_up as warm_up_module
    from pipeline.model.handle import ModelHandle

    warmed = []
    monkeypatch.setattr(ModelHandle, "loaded", lambda self: tiny_lm)
    monkeypatch.setattr(warm_up_module, "warm_cuda", warmed.append)
    handle = ModelHandle()
    handle.start_loading()
    handle._loader.join(timeout=60)
    assert warmed == [tiny_lm] and handle.load_error is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_a_server_start_warms_the_device(tokenizer):
    from kit.tiny_models import make_tiny_lm

    from pipeline.model.loader import LoadedModel

    tiny = make_tiny_lm(tokenizer)
    lm = LoadedModel(model=tiny.model.to("cuda"), tokenizer=tokenizer, name="tiny-cuda", device=torch.device("cuda"))
    assert warm_cuda(lm) is True
