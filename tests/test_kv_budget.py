"""The room's admission budget by device (pipeline.server.kv_budget): on a CPU the fixed budget as before; on CUDA
the device's free memory less a margin and the weights still to load (a fake mem_get_info stands for the device,
so this runs without one); the server's queue admits by it."""
import pytest
import torch

from pipeline.server.kv_budget import GPU_MARGIN_SHARE, KVBudget, kv_budget
from pipeline.server.run_queue import KV_BUDGET_BYTES

GiB = 2**30


def fake_device(free: int, total: int = 141 * GiB):
    """A stand-in for torch.cuda.mem_get_info: (free, total) bytes, and the devices it was asked about."""
    asked = []

    def mem_get_info(device):
        asked.append(device)
        return free, total
    return mem_get_info, asked


def test_the_cpu_keeps_the_fixed_budget():
    budget = kv_budget("cpu", weights_to_load_bytes=10 * GiB)
    assert budget == KVBudget(512 * 2**20, "cpu") and budget.bytes == KV_BUDGET_BYTES
    assert "fixed CPU budget" in budget.describe()


def test_on_cuda_the_budget_follows_free_memory_less_the_margin_and_the_weights_to_load():
    """By hand: 141 GiB total, 100 GiB free -> 100 - 14.1 (10 % margin) - 0.5 (weights) = 85.4 GiB; 20 GiB more
    free memory gives 20 GiB more budget; a device nearly full gives 0, not a negative budget."""
    info, asked = fake_device(100 * GiB)
    budget = kv_budget("cuda:1", weights_to_load_bytes=GiB // 2, mem_get_info=info)
    assert asked == [torch.device("cuda", 1)] and budget.device == "cuda:1"
    assert budget.margin_bytes == int(GPU_MARGIN_SHARE * 141 * GiB)
    assert budget.bytes == 100 * GiB - int(0.1 * 141 * GiB) - GiB // 2
    assert budget.bytes == pytest.approx(85.4 * GiB, rel=1e-9)
    more, _ = fake_device(120 * GiB)
    assert kv_budget("cuda:1", GiB // 2, mem_get_info=more).bytes - budget.bytes == 20 * GiB
    assert kv_budget("cuda:0", 0, mem_get_info=fake_device(10 * GiB)[0]).bytes == 0  # 10 GiB free < 14.1 margin
    assert "85.40 GiB of KV cache on cuda:1" in budget.describe()


def test_the_server_queue_admits_by_the_budget_it_is_given_and_by_the_cpus_by_default(tiny_lm):
    from pipeline.server.wiring import server_queue

    assert server_queue(lambda r: tiny_lm, 64, finish_inline=True).kv_budget_bytes == KV_BUDGET_BYTES
    info, _ = fake_device(50 * GiB, 80 * GiB)
    budget = kv_budget("cuda:0", mem_get_info=info)
    queue = server_queue(lambda r: tiny_lm, 64, finish_inline=True, budget=budget)
    assert queue.kv_budget_bytes == 42 * GiB == budget.bytes


def test_a_server_on_cuda_keeps_the_models_weights_out_of_its_budget(tmp_path, monkeypatch):
    """The queue is built before the models load: on CUDA the budget it takes leaves out the converted weights'
    bytes (their files in the weights cache), on a CPU nothing (the fixed budget)."""
    from pipeline.model import loader
    from pipeline.model.registry import GEMMA3, SMOLLM2
    from pipeline.model.weights_cache import weights_cache_dir
    from pipeline.server import wiring

    monkeypatch.setenv("TPE_CACHE_DIR", str(tmp_path))
    for spec, size in ((SMOLLM2, 3000), (GEMMA3, 5000)):
        weights_cache_dir(spec).mkdir(parents=True)
        (weights_cache_dir(spec) / "model.safetensors").write_bytes(b"\0" * size)
    (weights_cache_dir(SMOLLM2) / "tokenizer.json").write_bytes(b"\0" * 700)  # not weights
    assert wiring.stored_weights_bytes() == 8000
    asked = []
    monkeypatch.setattr(wiring, "kv_budget", lambda device, weights=0: asked.append((str(device), weights))
                        or KVBudget(GiB, str(device)))
    for device in ("cuda", "cpu"):
        monkeypatch.setattr(loader, "pick_device", lambda d=device: torch.device(d))
        wiring.server_queue(lambda r: None, 64, finish_inline=True)
    assert asked == [("cuda", 8000), ("cpu", 0)]
