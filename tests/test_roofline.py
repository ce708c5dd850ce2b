"""Prefill and decode on the roofline (pipeline/serving): FLOP and byte counts against a hand calculation
and torch's own FlopCounterMode, the ceilings, the batching sweep and the determinism report on tiny models."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from pipeline.model.dims import FULL, SLIDING, ModelDims
from pipeline.model.loader import LoadedModel
from pipeline.serving.costs import decode_cost, pass_cost, prefill_cost

SMOLLM2 = ModelDims(name="smollm2", L=30, H=9, Hkv=3, Dh=64, D=576, D_mlp=1536, V=49152, context_window=8192,
                    rope_base=1e5, dtype="float32", device="cpu", bytes_per_value=4)
GEMMA3 = ModelDims(name="gemma3", L=18, H=4, Hkv=1, Dh=256, D=640, D_mlp=2048, V=262144, context_window=32768,
                   rope_base=1e4, dtype="float32", device="cpu", bytes_per_value=4, architecture="gemma3_text",
                   layer_types=((SLIDING,) * 5 + (FULL,)) * 3, sliding_window=512, qk_norm=True)


def test_smollm2_decode_step_by_hand():
    c = decode_cost(SMOLLM2, past=99)
    # per layer: q, o 576x(9*64); k, v 576x(3*64); gate, up, down 576x1536; 2 FLOPs per multiply-add
    assert c.flops_linear == 30 * 2 * (576 * (9 + 3 + 3 + 9) * 64 + 3 * 576 * 1536) == 212_336_640
    assert c.flops_attention == 30 * 2 * 2 * 1 * (99 + 1) * 9 * 64 == 6_912_000  # q·k and p·v over 100 keys
    assert c.flops_head == 2 * 576 * 49152 == 56_623_104
    # weights: 30 blocks (attention, MLP, 2 norms), final norm, the tied 49152x576 table read by the head, 1 row
    weights = 30 * (576 * 24 * 64 + 3 * 576 * 1536 + 2 * 576) + 576 + 49152 * 576 + 576
    assert c.bytes_weights == 4 * weights == 538_062_336
    assert c.bytes_kv_read == 2 * 30 * 3 * 64 * 99 * 4 == 4_561_920
    assert c.bytes_kv_written == 2 * 30 * 3 * 64 * 1 * 4 == 46_080
    assert 0.5 < c.intensity < 0.52  # about one FLOP per two bytes: far below any CPU's or GPU's balance point


def test_gemma3_decode_step_by_hand_sliding_layers_read_511_keys():
    c = decode_cost(GEMMA3, past=1000)
    assert c.flops_linear == 18 * 2 * (640 * (4 + 1 + 1 + 4) * 256 + 3 * 640 * 2048) == 200_540_160
    # 15 sliding layers hold the last 511 positions (+ the new one), 3 full layers all 1000 (+1)
    assert c.flops_attention == 2 * 2 * 4 * 256 * (15 * 512 + 3 * 1001) == 43_757_568
    assert c.flops_head == 2 * 640 * 262144
    block = 640 * 10 * 256 + 3 * 640 * 2048 + 4 * 640 + 2 * 256  # 4 norms, QK-norms of width Dh
    assert c.bytes_weights == 4 * (18 * block + 640 + 262144 * 640 + 640)
    assert c.bytes_kv_read == 2 * 1 * 256 * (15 * 511 + 3 * 1000) * 4


def test_prefill_has_the_t_squared_term_and_batching_shares_the_weights():
    T = 200
    p = prefill_cost(SMOLLM2, T)
    assert p.flops_attention == 30 * 2 * 2 * T * T * 9 * 64
    assert p.flops_head == 2 * 576 * 49152  # only the last position's logits
    assert p.intensity > 50 * decode_cost(SMOLLM2, T).intensity
    one, eight = decode_cost(SMOLLM2, 50), decode_cost(SMOLLM2, 50, batch_size=8)
    assert eight.flops == 8 * one.flops
    assert eight.bytes_weights == one.bytes_weights + 7 * 576 * 4  # one read of the weights, 7 more embedding rows
    assert eight.bytes_kv_read == 8 * one.bytes_kv_read


def _tiny_models(tokenizer):
    from conftest import TINY_APP_LAYOUT, make_tiny_lm
    from test_architectures import tiny_gemma3

    return [make_tiny_lm(tokenizer, **TINY_APP_LAYOUT),  # tied embeddings
            make_tiny_lm(tokenizer),  # untied
            LoadedModel(model=tiny_gemma3(tokenizer).eval(), tokenizer=tokenizer, name="tiny-gemma",
                        device=torch.device("cpu"))]


@pytest.mark.parametrize("T, past", [(12, 0), (1, 11), (1, 40), (5, 40)])
def test_flops_equal_torch_flop_counter(tokenizer, T, past):
    """Eager attention runs as matrix multiplies FlopCounterMode sees (CPU SDPA is a kernel it does not count);
    past=40 is beyond the tiny Gemma's window, so its sliding layers read fewer keys than its full one."""
    for lm in _tiny_models(tokenizer):
        ids = list(range(100, 100 + past + T))
        cache = lm.forward([ids[:past]]).cache if past else None
        with FlopCounterMode(display=False) as counter:
            lm.forward([ids[past:]], cache=cache, attention="eager")
        assert counter.get_total_flops() == pass_cost(lm.dims, T, past).flops, lm.name


def test_weight_bytes_are_the_parameters(tokenizer):
    for lm in _tiny_models(tokenizer):
        m = lm.dims
        params = sum(p.numel() for p in lm.model.parameters())
        untied_head = 0 if lm.config.tie_word_embeddings else m.V * m.D  # the embedding table the pass barely reads
        assert pass_cost(m, 3).bytes_weights == (params - untied_head + 3 * m.D) * m.bytes_per_value, lm.name


@pytest.mark.model
def test_real_models_weights_are_their_parameters(lm, gemma_lm):
    for model in (lm, gemma_lm):
        params = sum(p.numel() for p in model.model.parameters())  # both tie the head to the embeddings
        assert pass_cost(model.dims, 1).bytes_weights == (params + model.dims.D) * model.dims.bytes_per_value
    assert decode_cost(lm.dims, 99) == decode_cost(SMOLLM2, 99)  # the hand-written configs are the real ones
    assert decode_cost(gemma_lm.dims, 1000) == decode_cost(GEMMA3, 1000)
