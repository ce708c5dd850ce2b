"""The MLP's neurons (pipeline/attribution/neurons.py) on tiny random-weight Llama and Gemma 3 models (fast tier)
and the real SmolLM2 and Gemma 3 (`model`).

References from outside the code under test: the activations the model itself feeds to down_proj (a forward
pre-hook), each neuron's contribution written out by hand from them (activation x column . W_U[t] through the
final norm, Gemma's output norm frozen at its 1/rms of the MLP's raw write), and the MLP's bar of the direct logit
attribution (the neurons must add up to it).

The record's activations are recomputed from one position's stream while the model computed them for every
position at once: two float32 computations, another kernel, so they agree within a tolerance derived from their
sums (kit.tolerance: each activation is act(x . w_gate) * (x . w_up), two dot products of width D after the input
norm's mean over D); the rest is float64.
"""
import numpy as np
import pytest
import torch
from kit.tolerance import U32, abs_dot, assert_within, float32_tolerance, float64_tolerance

from pipeline.attribution.dla import direct_logit_attribution
from pipeline.attribution.neurons import neuron_contributions, promoted_by_neuron, reading_direction
from pipeline.attribution.record import is_gemma, record_step
from pipeline.core.errors import InputError


@pytest.fixture(scope="module", params=["llama", "gemma"])
def tiny(request, tiny_models):
    """The tiny Llama, then the tiny Gemma 3 (kit.model_fixtures.tiny_models)."""
    return tiny_models[request.param]


def hooked_activations(lm, ids, layer) -> tuple[np.ndarray, np.ndarray]:
    """(T, I) what the model feeds to down_proj at `layer` in a plain forward pass, and (T, D) the MLP's input."""
    seen, inputs = [], []
    mlp = lm.model.model.layers[layer].mlp
    handles = [mlp.down_proj.register_forward_pre_hook(lambda _m, args: seen.append(args[0][0].double().clone())),
               mlp.register_forward_pre_hook(lambda _m, args: inputs.append(args[0][0].double().clone()))]
    try:
        lm.forward(torch.tensor([ids]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return seen[0].numpy(), inputs[0].numpy()


SLOPE = 1.13  # the steepest slope of SiLU (1.0998) and of GELU (1.1289): how far an error in the gate moves act


def activation_tolerance(mlp, x) -> np.ndarray:
    """(I,) how far two float32 computations of the activations from the MLP's input x (D,) may differ: the gate
    and up dot products (D terms each, after the input norm's own mean over D: depth 2), the gate's error through
    act's slope times the up value, the up's error times act(gate), and the product's rounding."""
    w_gate, w_up = (m.weight.detach().double().numpy() for m in (mlp.gate_proj, mlp.up_proj))  # (I, D)
    D = x.shape[-1]
    gate, up = x @ w_gate.T, x @ w_up.T
    d_gate = float32_tolerance(D, 1.0, depth=2) * abs_dot(x, w_gate)
    d_up = float32_tolerance(D, 1.0, depth=2) * abs_dot(x, w_up)
    act = mlp.act_fn(torch.from_numpy(gate)).numpy()
    return SLOPE * d_gate * (np.abs(up) + d_up) + np.abs(act) * d_up + 2 * U32 * np.abs(act * up)


def by_hand(lm, rec, acts, layer, target, position) -> np.ndarray:
    """(I,) each neuron's part of the logit written out from the hooked activations."""
    model = lm.model.model
    mlp = model.layers[layer].mlp
    w = mlp.down_proj.weight.detach().double().numpy()  # (D, I)
    x = rec.resid[-1, position].astype(np.float64)
    norm = model.norm
    g = (1.0 + norm.weight if is_gemma(lm) else norm.weight).detach().double().numpy()
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    u = lm.model.lm_head.weight[target].detach().double().numpy() * g / np.sqrt(np.mean(x * x) + eps)
    a = acts[position]
    if is_gemma(lm):
        post = model.layers[layer].post_feedforward_layernorm
        raw = w @ a
        u = u * (1.0 + post.weight.detach().double().numpy()) / np.sqrt(np.mean(raw * raw) + post.eps)
    return np.array([a[n] * (w[:, n] @ u) for n in range(len(a))])


def check_layer(lm, ids, layer, position=-1):
    rec = record_step(lm, ids)
    target = int(rec.logits.argmax())
    nc = neuron_contributions(rec, lm, layer, target, position)
    acts, inputs = hooked_activations(lm, ids, layer)
    mlp = lm.model.model.layers[layer].mlp
    d_act = activation_tolerance(mlp, inputs[position])
    assert_within(nc.activations, acts[position], d_act, "activations: recomputed against the model's")
    hand = by_hand(lm, rec, acts, layer, target, position)
    # each neuron, by hand: a_n times its column's reading, float64 from the two sets of activations (Gemma's frozen
    # output scale, 1/rms of W_down a, moves by at most the activations' error read through |W_down|)
    w_down = mlp.down_proj.weight.detach().double().numpy()  # (D, I)
    raw = w_down @ acts[position]
    rel = np.linalg.norm(np.abs(w_down) @ d_act) / np.linalg.norm(raw) if is_gemma(lm) else 0.0
    d_contrib = d_act * np.abs(nc.per_unit) + 2 * rel * np.abs(hand)
    assert_within(nc.contributions, hand, d_contrib + float64_tolerance(lm.dims.D, np.abs(hand).max()), "neurons")
    # the neurons make up the MLP's part: the record's write is the model's float32 down projection (I terms, then
    # Gemma's output norm over D) of the model's activations, ours float64 from the recomputed ones
    u = reading_direction(rec, lm, target, position) * (1.0 if nc.out_scale is None else nc.out_scale)
    d_write = float32_tolerance(w_down.shape[1], 1.0) * abs_dot(w_down, np.abs(acts[position]))  # (D,)
    d_sum = (d_act @ np.abs(nc.per_unit) + np.abs(u) @ d_write
             + abs(nc.mlp_part) * (2 * rel + float32_tolerance(lm.dims.D, 1.0, depth=2)))
    assert_within(nc.contributions.sum(), nc.mlp_part, d_sum, "the neurons' sum against the MLP's part")
    if position in (-1, len(ids) - 1):  # the bar reads the same record through the same frozen norm, in float64
        mlp_bar = direct_logit_attribution(rec, lm, target).mlp[layer]
        magnitude = float(np.abs(rec.mlp[layer, position]) @ np.abs(u))
        assert_within(nc.mlp_part, mlp_bar, float64_tolerance(lm.dims.D, magnitude, depth=2), "the MLP's bar")
    return rec, nc


def test_neurons_add_up_to_the_mlps_part_of_the_logit(tiny, tokenizer):
    ids = tokenizer("Are tomatoes fruit? Yes, they")["input_ids"]
    for layer in range(tiny.dims.L):
        rec, nc = check_layer(tiny, ids, layer)
    check_layer(tiny, ids, 1, position=3)  # an earlier position: its own next-token reading
    top = nc.top(4)
    assert [abs(nc.contributions[n]) for n in top] == sorted((abs(nc.contributions[n]) for n in top), reverse=True)
    up = promoted_by_neuron(rec, tiny, nc, top[0], k=3)
    assert len(up) == 3 and up[0][1] >= up[1][1] >= up[2][1]
    with pytest.raises(InputError, match="layer"):
        neuron_contributions(rec, tiny, tiny.dims.L, 0)
    with pytest.raises(InputError, match="position"):
        neuron_contributions(rec, tiny, 0, 0, position=len(ids))


@pytest.mark.model
@pytest.mark.parametrize("which", ["lm", "gemma_lm"])
def test_real_models_neurons_add_up_to_the_mlps_part(which, request):
    """The default question's first answer token: in the last layer and a middle one, every neuron's part matches
    the hand computation and they sum to the MLP's bar of the direct logit attribution."""
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    lm = request.getfixturevalue(which)
    ids = tokenize_request(lm.tokenizer, ChatRequest.from_question("Are tomatoes fruit?")).ids
    for layer in (lm.dims.L // 2, lm.dims.L - 1):
        check_layer(lm, ids, layer)
