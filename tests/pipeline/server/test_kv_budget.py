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


def test_a_static_batch_is_admitted_by_the_padded_bucket_it_will_allocate(tiny_lm):
    """The static batched step pads its rows to a bucket (rows to a power of two, every row to the longest need's
    power of two of positions) and keeps its buffer: the queue admits by what it will hold. Two short requests
    whose own caches fit a budget together, but whose bucket does not, decode one after the other through the static
    step and together through the eager batch; the bytes admission predicted are the buffer the static step then
    really allocated; and the eager engine's figure is reserve's, as before (the CPU path unchanged)."""
    import threading

    from pipeline.server.run_queue import RunQueue
    from pipeline.server.trace_engine import TraceEngine, kv_reserve
    from pipeline.stages.request import ChatRequest, GenerationOptions

    requests = [ChatRequest.from_question(q, options=GenerationOptions(max_new_tokens=k))
                for q, k in (("Hi", 4), ("Why is the sky blue?", 5))]
    payloads = [(f"r{i}", r, None) for i, r in enumerate(requests)]
    prompts, own = zip(*(kv_reserve(tiny_lm, r) for r in requests))
    eager = TraceEngine(lambda r: tiny_lm, static_batch=False)
    static = TraceEngine(lambda r: tiny_lm, static_batch=True)
    assert eager.held_bytes(payloads, prompts) == sum(own)
    padded = static.held_bytes(payloads, prompts)  # 2 rows x 64 positions in every layer: more than both own caches
    assert padded > sum(own) and static.held_bytes(payloads[:1], prompts[:1]) < padded
    budget = (sum(own) + padded) // 2

    def served_together(engine) -> list[int]:
        q = RunQueue(engines={"trace": engine}, kv_budget_bytes=budget)
        release = threading.Event()
        q.submit("gate", lambda: release.wait(10), cost=1)  # both wait, so both are offered in the same gap
        tickets = [q.submit(key, lambda: pytest.fail("stepped"), batch=("trace", payload))
                   for (key, _, _), payload in zip(payloads, payloads)]
        release.set()
        return [max(s.batch_size for s in t.result(60).steps) for t in tickets]

    assert served_together(eager) == [2, 2]
    assert served_together(static) == [1, 1]  # the second waited for the first to leave
    graphs = static.graphs[id(tiny_lm)]
    assert graphs.buffer.numel() * graphs.buffer.element_size() == static.held_bytes(payloads[:1], prompts[:1])
    # the buffer is kept after the batch: admitting again counts at least what it holds
    assert static.held_bytes(payloads[1:], prompts[1:]) >= graphs.buffer.numel() * graphs.buffer.element_size()


def test_the_bucket_bytes_by_hand():
    """SmolLM2 in float32: 30 layers, 3 KV heads of 64 values, 4 bytes: 1,536 B a position in a layer. Twenty rows,
    the longest needing 4,100 positions, step in the bucket of 32 rows x 8,192 positions: 30 x 32 x 8,192 x 1,536 B
    = 12,079,595,520 B, where 20 rows of 4,100 positions would hold 3,778,560,000 B."""
    from types import SimpleNamespace

    from pipeline.stages.graphed_batch_decoding import bucket_bytes

    dims = SimpleNamespace(L=30, Hkv=3, Dh=64, bytes_per_value=4)
    assert bucket_bytes(SimpleNamespace(dims=dims), 20, 4_100) == 30 * 32 * 8_192 * 1_536 == 12_079_595_520
    assert bucket_bytes(SimpleNamespace(dims=dims), 20, 4_100, max_batch=24) == 30 * 24 * 8_192 * 1_536
