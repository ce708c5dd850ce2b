"""KV-cache memory maths checked by hand (fast tier), and cache on/off giving the same tokens (real model)."""
import pytest

from pipeline.core.errors import InputError
from pipeline.model.dims import FULL, SLIDING, ModelDims, kv_bytes_formula
from pipeline.stages.kv_cache import (
    ModelShape,
    bytes_by_layer,
    bytes_per_token,
    compare,
    conversation_bytes,
    fit,
    human_bytes,
    load_configs,
)

SMOLLM2 = ModelDims(name="SmolLM2-135M-Instruct", L=30, H=9, Hkv=3, Dh=64, D=576, D_mlp=1536, V=49152,
                    context_window=8192, rope_base=100000.0, dtype="float32", device="cpu", bytes_per_value=4)


@pytest.fixture(scope="module")
def cfg():
    return load_configs()


def test_qwen3_8b_is_about_147_kb_per_token_in_16_bit(cfg):
    m = cfg["models"]["Qwen3-8B"]
    assert bytes_per_token(m, 2) == 2 * 36 * 8 * 128 * 2 == 147_456
    assert human_bytes(bytes_per_token(m, 2)) == "147.5 KB"


@pytest.mark.parametrize("name, per_token_16bit", [
    ("SmolLM2-135M-Instruct", 2 * 30 * 3 * 64 * 2),  # 23,040
    ("Llama-3.1-8B", 2 * 32 * 8 * 128 * 2),  # 131,072
    ("Llama-3.1-70B", 2 * 80 * 8 * 128 * 2),  # 327,680
    ("Qwen3-32B", 2 * 64 * 8 * 128 * 2),  # 262,144
])
def test_bytes_per_token_by_hand(cfg, name, per_token_16bit):
    m = cfg["models"][name]
    assert bytes_per_token(m, 2) == per_token_16bit
    assert bytes_per_token(m, 1) * 2 == per_token_16bit == bytes_per_token(m, 4) // 2


def test_conversations_fit_by_hand(cfg):
    # Qwen3-8B on an H100 "80GB" = 80 GiB, 16-bit weights and cache, 4,096-token conversations, nothing reserved:
    # GPU 80 * 2^30 = 80 * 1,073,741,824 = 85,899,345,920 B;
    # weights 8.2e9 * 2 = 16,400,000,000 B; free 85,899,345,920 - 16,400,000,000 = 69,499,345,920 B;
    # one conversation 147,456 * 4,096 = 603,979,776 B (= 576 MiB);
    # 69,499,345,920 / 603,979,776 = 115.07 -> 115 (115 * 603,979,776 = 69,457,674,240 <= free).
    assert cfg["gpus"]["NVIDIA H100 80GB"] == 80
    f = fit(cfg["models"]["Qwen3-8B"], 80, 4096, 2, 2, reserve=0.0)
    assert f.gpu_bytes == 85_899_345_920
    assert f.weights_bytes == 16_400_000_000
    assert f.free_bytes == 69_499_345_920
    assert f.conversation_bytes == 603_979_776
    assert f.conversations == 115
    # keeping 10% free: 0.9 * 85,899,345,920 = 77,309,411,328; - 16,400,000,000 = 60,909,411,328 B;
    # / 603,979,776 = 100.85 -> 100
    assert fit(cfg["models"]["Qwen3-8B"], 80, 4096, 2, 2, reserve=0.1).conversations == 100


def test_human_bytes_decimal_and_binary():
    assert human_bytes(147_456) == "147.5 KB"  # 147,456 / 1,000
    assert human_bytes(147_456, binary=True) == "144.0 KiB"  # 147,456 / 1,024 = 144
    assert human_bytes(603_979_776, binary=True) == "576.0 MiB"  # 603,979,776 / 2^20 = 576
    assert human_bytes(80 * 2**30, binary=True) == "80.0 GiB"
    assert human_bytes(80 * 2**30) == "85.9 GB"  # the same card in decimal units (2^30 / 10^9 = 1.074)
    assert human_bytes(512) == "512 B" == human_bytes(512, binary=True)


def test_weights_that_do_not_fit_give_zero(cfg):
    f = fit(cfg["models"]["Llama-3.1-70B"], 80, 4096, 2, 2)  # 70.6e9 * 2 = 141.2e9 B of weights > 85.9e9 B (80 GiB)
    assert f.free_bytes < 0 and f.conversations == 0


def test_sliding_window_layers_stop_growing():
    m = ModelShape("toy", 1.0, layers=4, heads=4, kv_heads=2, head_dim=8, context=1000,
                   sliding_layers=2, sliding_window=10)
    # 2 full layers * 100 tokens + 2 sliding layers * 10 tokens, each 2 * 2 Hkv * 8 Dh * 2 B = 64 B per layer-token
    assert conversation_bytes(m, 100, 2) == 64 * (2 * 100 + 2 * 10)


@pytest.mark.parametrize("T, by_hand", [
    # Gemma 3 270M's published config: 18 layers, full attention in 5, 11, 17, the rest slide over 512
    # positions; 1 KV head of 256 numbers, 16-bit: 2 * 1 * 256 * 2 = 1,024 B per layer and position.
    (600, (15 * 512 + 3 * 600) * 1024),  # 9,707,520 B: the sliding layers stopped at 512
    (300, 18 * 300 * 1024),  # 5,529,600 B: shorter than the window, every layer holds all 300
    (512, 18 * 512 * 1024),
    (513, (15 * 512 + 3 * 513) * 1024),
])
def test_the_calculator_sums_each_layers_window(cfg, T, by_hand):
    m = cfg["models"]["Gemma-3-270M"]
    assert [i for i, w in enumerate(m.windows()) if w is None] == [5, 11, 17]
    assert conversation_bytes(m, T, 2) == by_hand
    assert bytes_by_layer(m, T, 2)[:6] == [min(T, 512) * 1024] * 5 + [T * 1024]
    assert fit(m, 24, T, 2, 2).conversation_bytes == by_hand


def test_a_shape_from_the_models_own_dims_keeps_its_windows():
    dims = ModelDims(name="tiny-gemma3", L=3, H=4, Hkv=1, Dh=16, D=32, D_mlp=48, V=100, context_window=512,
                     rope_base=10000.0, dtype="float32", device="cpu", bytes_per_value=4, architecture="gemma3_text",
                     layer_types=(SLIDING, SLIDING, FULL), sliding_window=4)
    m = ModelShape.from_dims(dims)
    assert m.windows() == (4, 4, None)
    # 10 tokens, float32: 2 sliding layers * 4 positions + 1 full layer * 10, each 2 * 1 * 16 * 4 = 128 B
    assert bytes_by_layer(m, 10, 4) == [512, 512, 1280] and conversation_bytes(m, 10, 4) == 128 * (2 * 4 + 10)
    assert ModelShape.from_dims(SMOLLM2).windows() == (None,) * 30
    with pytest.raises(InputError, match="layer_windows"):
        ModelShape("bad", 1.0, layers=3, heads=4, kv_heads=1, head_dim=8, context=100, layer_windows=(4, None))


def test_every_gpu_and_model_in_the_assets_is_usable(cfg):
    assert {"NVIDIA H100 80GB", "NVIDIA A100 40GB", "NVIDIA A100 80GB", "NVIDIA L4 24GB",
            "GeForce RTX 4090 24GB", "NVIDIA H200 141GB"} <= set(cfg["gpus"])
    for m in cfg["models"].values():
        assert m.params_b > 0 and m.heads % m.kv_heads == 0


def test_model_dims_by_hand():
    assert SMOLLM2.kv_bytes(1) == 2 * 30 * 3 * 64 * 4 == 46_080
    assert SMOLLM2.kv_bytes(10, bytes_per_value=2) == 230_400
    assert SMOLLM2.group == 3 and [SMOLLM2.kv_head(h) for h in range(9)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert kv_bytes_formula(36, 8, 128, 1, 2) == 147_456  # Qwen3-8B, 16-bit
    j = SMOLLM2.to_json()
    assert (j["layers"], j["heads"], j["kv_heads"], j["head_dim"], j["rope_theta"]) == (30, 9, 3, 64, 100000.0)


def test_model_dims_read_from_a_config(tiny_lm):
    d = tiny_lm.dims
    c = tiny_lm.config
    assert (d.L, d.H, d.Hkv, d.Dh, d.D, d.V) == (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
                                                 c.hidden_size // c.num_attention_heads, c.hidden_size, c.vocab_size)
    assert d.context_window == c.max_position_embeddings and d.bytes_per_value == 4 and d.dtype == "float32"


@pytest.mark.model
def test_cache_on_and_off_choose_the_same_tokens(lm):
    ids = lm.tokenizer.apply_chat_template([{"role": "user", "content": "Are tomatoes fruit?"}],
                                           add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    from pipeline.model.passes import PassCounter, counting_passes

    with counting_passes(PassCounter()) as mine:  # this thread's passes only: an earlier app test's warm-up may
        r = compare(lm, ids, n_steps=4, repeats=1, again=False)  # still be using the shared model
    assert r["same_tokens"] and len(r["cache"]["tokens"]) == 4
    assert r["cache"]["tokens_fed"] == [len(ids), 1, 1, 1]
    assert r["no_cache"]["tokens_fed"] == [len(ids) + i for i in range(4)]
    assert mine.n == 8
    assert r["tokens_computed"] == {"cache": len(ids) + 3, "no_cache": 4 * len(ids) + 6}


def test_four_bit_weights_let_gpt_oss_120b_fit_on_one_h100(cfg):
    m = cfg["models"]["gpt-oss-120b"]
    assert fit(m, 80, 4096, 2, cfg["weight_dtypes"]["16-bit (bfloat16 / float16)"]).conversations == 0
    # 4-bit: 116.8e9 * 0.5 = 58,400,000,000 B of weights; free 85,899,345,920 - 58,400,000,000 = 27,499,345,920 B
    four = fit(m, 80, 4096, 2, 0.5)
    assert four.weights_bytes == 58_400_000_000
    assert four.free_bytes == 27_499_345_920
    # 18 full layers * 4,096 tokens + 18 sliding layers * 128 tokens, 2 * 8 Hkv * 64 Dh * 2 B = 2,048 B each:
    # 2,048 * (73,728 + 2,304) = 2,048 * 76,032 = 155,713,536 B per conversation
    assert four.conversation_bytes == 2048 * (18 * 4096 + 18 * 128) == 155_713_536
    # 27,499,345,920 / 155,713,536 = 176.6 -> 176
    assert four.conversations == 176


def test_cache_on_and_off_bookkeeping_on_a_tiny_model(tiny_lm):
    ids = tiny_lm.tokenizer("Are tomatoes fruit? Yes, botanically they are.")["input_ids"]
    calls = tiny_lm.calls
    r = compare(tiny_lm, ids, n_steps=5, repeats=2, again=False)  # timings on a tiny model are noise anyway
    assert r["cache"]["tokens_fed"] == [len(ids), 1, 1, 1, 1]
    assert r["no_cache"]["tokens_fed"] == [len(ids) + i for i in range(5)]
    assert r["same_tokens"] and r["cache"]["tokens"] == r["no_cache"]["tokens"]
    assert r["tokens_computed"] == {"cache": len(ids) + 4, "no_cache": 5 * len(ids) + 10}
    assert tiny_lm.calls - calls == 2 * 2 * 5  # both ways, twice, five steps each
    from pipeline.core.errors import InputError

    with pytest.raises(InputError) as err:
        compare(tiny_lm, [1] * 1020, n_steps=5)  # the run without a cache is kept within 1,024 tokens
    assert err.value.field == "n_steps"


def _fake_runs(monkeypatch, on_seconds: list[float], off_seconds: list[float]):
    """with_cache / without_cache replaced by runs that took the given totals, in call order."""
    from pipeline.stages import kv_cache

    on, off = iter(on_seconds), iter(off_seconds)
    run = lambda it: {"tokens": [1], "tokens_fed": [1], "seconds": [next(it)]}  # noqa: E731
    monkeypatch.setattr(kv_cache, "with_cache", lambda lm, ids, n: run(on))
    monkeypatch.setattr(kv_cache, "without_cache", lambda lm, ids, n: run(off))


def test_cache_measured_slower_is_measured_again(monkeypatch):
    _fake_runs(monkeypatch, [0.9] * 3 + [0.1] * 6, [0.2] * 3 + [0.5] * 6)  # busy first, then the real lesson
    r = compare(None, [1, 2], n_steps=1, repeats=3)
    assert r["repeats"] == 6 and not r["timing"].noise and "5.0× faster" in r["timing"].verdict("with", "without")


def test_cache_still_measured_slower_is_shown_as_noise(monkeypatch):
    _fake_runs(monkeypatch, [0.9] * 9, [0.2] * 9)
    t = compare(None, [1, 2], n_steps=1, repeats=3)["timing"]
    assert t.noise and "noise" in t.verdict("with the cache", "without it")
