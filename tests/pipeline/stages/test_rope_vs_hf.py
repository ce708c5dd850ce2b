"""The Position (RoPE) page's q and k "turned back to before RoPE" are Hugging Face's own: compared with the model's
q and k taken from its projections (q_proj/k_proj; Gemma 3: after q_norm/k_norm) in a plain forward pass, and our
rotation with the layer's base equals the rotated q and k HF's attention uses (its apply_rotary_pos_emb, recorded).
A wrong base fails here: Gemma 3 turns its full layers (5, 11, 17) with 1,000,000 and the others with 10,000; one
base for every layer (the page's old 10,000) un-rotates layer 5 into other vectors. Both models, on the real weights.
"""
import sys

import numpy as np
import pytest
import torch
from kit.texts import DEFAULT_QUESTION
from kit.tolerance import assert_within, forward_tolerance, rope_tolerance, scale

from pipeline.model.prefill import run_prefill
from pipeline.stages.position import layer_pre_rope, rotate
from pipeline.stages.request import ChatRequest
from pipeline.stages.tokens import tokenize_request

pytestmark = pytest.mark.model

LAYERS = {"lm": [0, 10, 29], "gemma_lm": [0, 4, 5, 17]}  # Gemma: sliding 0 and 4, full 5 and 17


def hf_q_k(lm, ids: list[int]) -> dict[str, list[np.ndarray]]:
    """One plain HF forward pass: per layer, q (H, T, Dh) and k (Hkv, T, Dh) before RoPE from the projections
    (and Gemma's q/k norms), and after RoPE as HF's attention receives them from apply_rotary_pos_emb."""
    d, layers = lm.dims, lm.model.model.layers
    out: dict[str, list[np.ndarray]] = {"q": [], "k": [], "q_rot": [], "k_rot": []}
    heads = lambda x, n: x.reshape(x.shape[0], x.shape[1], n, d.Dh).transpose(1, 2)  # noqa: E731 (B, n, T, Dh)
    keep = lambda name, x: out[name].append(x[0].float().cpu().numpy())  # noqa: E731

    def hook(name, n):
        if hasattr(layers[0].self_attn, "q_norm"):  # normed per head, heads already first: (B, n, T, Dh)
            return lambda _m, _a, y: keep(name, y)
        return lambda _m, _a, y: keep(name, heads(y, n))  # the projection: (B, T, n*Dh)

    modeling = sys.modules[type(layers[0].self_attn).__module__]
    original = modeling.apply_rotary_pos_emb

    def recorded(q, k, *args, **kwargs):
        q_rot, k_rot = original(q, k, *args, **kwargs)
        keep("q_rot", q_rot)
        keep("k_rot", k_rot)
        return q_rot, k_rot

    handles = []
    for block in layers:
        a = block.self_attn
        handles.append(getattr(a, "q_norm", a.q_proj).register_forward_hook(hook("q", d.H)))
        handles.append(getattr(a, "k_norm", a.k_proj).register_forward_hook(hook("k", d.Hkv)))
    modeling.apply_rotary_pos_emb = recorded
    try:
        with lm.lock, torch.inference_mode():
            lm.model(input_ids=torch.tensor([ids], device=lm.device), use_cache=False)
    finally:
        modeling.apply_rotary_pos_emb = original
        for h in handles:
            h.remove()
    assert all(len(v) == d.L for v in out.values())
    return out


def close(ours, hf, tol, what):
    assert_within(ours, hf, tol, what)


@pytest.mark.parametrize("model", ["lm", "gemma_lm"])
def test_turned_back_q_and_k_are_hfs_own(request, model):
    lm = request.getfixturevalue(model)
    d = lm.dims
    ids = tokenize_request(lm.tokenizer, ChatRequest.from_question(DEFAULT_QUESTION)).ids
    T = len(ids)
    hf = hf_q_k(lm, ids)
    prefill = run_prefill(lm, ids).prefill
    for layer in LAYERS[model]:
        base = d.rope_base_of(layer)
        # ours rotates in float64 the very q and k HF rotated in float32: RoPE's own rounding apart
        rq, rk = rope_tolerance(hf["q"][layer], T), rope_tolerance(hf["k"][layer], T)
        close(rotate(hf["q"][layer], np.arange(T), base), hf["q_rot"][layer], rq, f"HF's q, layer {layer}, base {base}")
        close(rotate(hf["k"][layer], np.arange(T), base), hf["k_rot"][layer], rk, f"HF's k, layer {layer}, base {base}")
        # the prefill's q and k come from another pass (the blocks before and the projection), rotated in float32
        # there and turned back in float64 here
        pq = forward_tolerance(d, scale(hf["q"][layer]), T, layers=layer + 1) + rq
        pk = forward_tolerance(d, scale(hf["k"][layer]), T, layers=layer + 1) + rk
        for head in range(d.H):
            q, k = layer_pre_rope(prefill, d, layer, head)  # what the page shows
            close(q, hf["q"][layer][head], pq, f"pre-RoPE q, layer {layer} head {head}")
            close(k, hf["k"][layer][d.kv_head(head)], pk, f"pre-RoPE k, layer {layer} head {head}")
    if model == "gemma_lm":  # a full layer among them: its base is not the sliding layers'
        assert {d.rope_base_of(i) for i in LAYERS[model]} == {10_000.0, 1_000_000.0}
