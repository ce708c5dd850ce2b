"""The MLP's neurons (pipeline/attribution/neurons.py) on tiny random-weight Llama and Gemma 3 models (fast tier)
and the real SmolLM2 and Gemma 3 (`model`).

References from outside the code under test: the activations the model itself feeds to down_proj (a forward
pre-hook), each neuron's contribution written out by hand from them (activation x column . W_U[t] through the
final norm, Gemma's output norm frozen at its 1/rms of the MLP's raw write), and the MLP's bar of the direct logit
attribution (the neurons must add up to it within 1e-4).
"""
import numpy as np
import pytest
import torch

from pipeline.attribution.dla import direct_logit_attribution
from pipeline.attribution.neurons import neuron_contributions, promoted_by_neuron
from pipeline.attribution.record import is_gemma, record_step
from pipeline.core.errors import InputError


@pytest.fixture(scope="module", params=["llama", "gemma"])
def tiny(request, tiny_models):
    """The tiny Llama, then the tiny Gemma 3 (kit.model_fixtures.tiny_models)."""
    return tiny_models[request.param]


def hooked_activations(lm, ids, layer) -> np.ndarray:
    """(T, I) what the model feeds to down_proj at `layer` in a plain forward pass."""
    seen = []
    mlp = lm.model.model.layers[layer].mlp
    handle = mlp.down_proj.register_forward_pre_hook(lambda _m, args: seen.append(args[0][0].double().clone()))
    try:
        lm.forward(torch.tensor([ids]), use_cache=False)
    finally:
        handle.remove()
    return seen[0].numpy()


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
    acts = hooked_activations(lm, ids, layer)
    np.testing.assert_allclose(nc.activations, acts[position], rtol=1e-4, atol=1e-5)
    hand = by_hand(lm, rec, acts, layer, target, position)
    np.testing.assert_allclose(nc.contributions, hand, rtol=1e-3, atol=1e-6)  # each neuron, by hand
    assert nc.contributions.sum() == pytest.approx(nc.mlp_part, abs=1e-4)  # the neurons make up the MLP's part
    if position in (-1, len(ids) - 1):
        mlp_bar = direct_logit_attribution(rec, lm, target).mlp[layer]
        assert nc.contributions.sum() == pytest.approx(mlp_bar, abs=1e-4)
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
    the hand computation and they sum to the MLP's bar of the direct logit attribution within 1e-4."""
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    lm = request.getfixturevalue(which)
    ids = tokenize_request(lm.tokenizer, ChatRequest.from_question("Are tomatoes fruit?")).ids
    for layer in (lm.dims.L // 2, lm.dims.L - 1):
        check_layer(lm, ids, layer)
