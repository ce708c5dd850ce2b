"""The operations a pass runs (pipeline.costs.launches): what counts, and how the count grows with a model's depth
and its number format, checked against a hand count of Hugging Face's Llama layer."""
import pytest
import torch

from pipeline.costs.launches import operations


def tiny(layers: int, width: int = 64, dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=width, num_hidden_layers=layers,
                                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=2 * width,
                                         attn_implementation="sdpa")).eval()
    return model.to(dtype)


def one_token_pass(model):
    def run():
        with torch.inference_mode():
            model(input_ids=torch.tensor([[7]]), logits_to_keep=1)
    return operations(run)


def test_views_and_casts_to_the_same_dtype_launch_nothing():
    x, y = torch.randn(4, 6), torch.randn(6, 3)
    assert operations(lambda: x.t()[:3].unsqueeze(0)).total == 0  # views
    assert operations(lambda: x.reshape(-1)).total == 0  # a reshape that keeps the storage
    assert operations(lambda: x.to(torch.float32)).total == 0  # already float32
    assert operations(lambda: x @ y).by_name == {"mm": 1}
    assert operations(lambda: x.t().reshape(-1)).by_name == {"clone": 1}  # a transpose's reshape copies
    cast = operations(lambda: x.to(torch.bfloat16))
    assert cast.by_name == {"to bfloat16": 1} and cast.casts() == 1
    assert operations(lambda: (x * 2 + 1).sum()).by_name == {"mul": 1, "add": 1, "sum": 1}
    read = operations(lambda: int(x.argmax()) + float(x.sum()))  # two values read on the host: two waits on a GPU
    assert read.by_name == {"argmax": 1, "sum": 1} and read.host_reads == 2
    assert operations(lambda: x.argmax()).host_reads == 0
    with torch.inference_mode():  # composite ops are not split into their parts there: still one each
        assert operations(lambda: x @ y).total == 1 and operations(lambda: x.t().reshape(-1)).by_name == {"clone": 1}


def test_a_pass_runs_as_many_operations_whatever_its_width_and_a_fixed_number_more_per_layer():
    """The count is the launch-bound regime's cost: it follows the depth, never the width."""
    by_depth = {layers: one_token_pass(tiny(layers)).total for layers in (2, 3, 4)}
    assert one_token_pass(tiny(3, width=128)).total == by_depth[3]
    per_layer = by_depth[3] - by_depth[2]
    assert by_depth[4] - by_depth[3] == per_layer
    # A Llama layer by hand: 7 projections; 2 RMS norms of 5 ops (square, mean, + eps, rsqrt, scale) and a weight
    # multiply each; rotary: q and k each rotate_half (negate, join) then x cos + rotate_half(x) sin (2 mul, 1 add);
    # the cache's keys and values each joined to the new position; attention; 2 residual adds; SiLU, its gate's
    # multiply. Some of these may fuse in another transformers release: the count must stay near the hand's.
    by_hand = 7 + 2 * 6 + 2 * (2 + 3) + 2 + 1 + 2 + 2
    assert by_hand - 4 <= per_layer <= by_hand + 4, (per_layer, by_hand)


@pytest.mark.parametrize("layers", [2, 4])
def test_bfloat16_weights_add_two_casts_per_norm_and_nothing_else(layers):
    """HF's RMSNorm computes in float32: in bf16 each norm casts its input up and its result back (2 layers' worth
    of norms per layer, and the final one). Every other operation is the same in both formats."""
    fp32, bf16 = one_token_pass(tiny(layers)), one_token_pass(tiny(layers, dtype=torch.bfloat16))
    others = lambda ops: {k: v for k, v in ops.by_name.items() if not k.startswith("to ")}  # noqa: E731
    assert others(bf16) == others(fp32)
    norms = 2 * layers + 1
    extra = bf16.casts() - fp32.casts()
    assert norms * 2 <= extra <= norms * 2 + 4, (extra, norms)  # the rotary tables' casts: a few, not per layer
    assert bf16.by_name["to bfloat16"] >= norms


def test_bfloat16_casts_grow_by_four_per_layer():
    extra = {n: one_token_pass(tiny(n, dtype=torch.bfloat16)).casts() - one_token_pass(tiny(n)).casts()
             for n in (2, 4)}
    assert extra[4] - extra[2] == 2 * 2 * 2  # two layers more, two norms each, two casts each
