"""Weight formats (pipeline.model.weight_formats): every format keeps the captures' hook names and shapes, the
int8 copy holds fewer bytes, the `weights` option is validated and carried by the link and the run key.
Fast tier (tiny models); the real-weight checks are in tests/pipeline/model/test_weight_formats_model.py."""
import pytest
from kit.texts import DEFAULT_QUESTION
from kit.tiny_models import tiny_llama_or_gemma
from kit.tolerance import assert_within, attention_tolerance, float32_tolerance, logits_tolerance

from pipeline.core.errors import InputError
from pipeline.model.weight_formats import WEIGHT_FORMATS, check_weights


@pytest.fixture(scope="module", params=["llama", "gemma"])
def tiny_formats(request, tokenizer):
    """{format: LoadedModel}: one tiny random Llama (tied head, as SmolLM2), then a tiny Gemma 3 (sliding layers,
    4 norms a block, scaled embeddings), converted to each format."""
    from pipeline.model.loader import converted_copy

    base = tiny_llama_or_gemma(request, tokenizer, request.param)
    return {w: base if w == "fp32" else converted_copy(base, w) for w in WEIGHT_FORMATS}


def test_every_format_keeps_the_captures_names_and_shapes(tiny_formats):
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    request = ChatRequest.from_question(DEFAULT_QUESTION, options=GenerationOptions(max_new_tokens=3))
    traces = {w: run_trace(request, lm) for w, lm in tiny_formats.items()}
    reference = {k: (v.shape, v.dtype) for k, v in traces["fp32"].tensors().items()}
    for weights, trace in traces.items():  # bf16 captures are stored as float32 arrays, as fp32's are
        assert {k: (v.shape, v.dtype) for k, v in trace.tensors().items()} == reference, weights
        assert trace.dims.weights == weights and trace.to_json()["model"]["weights"] == weights


def test_the_int8_copy_holds_fewer_bytes_and_keeps_the_head(tiny_formats):
    from pipeline.model.weight_formats import bytes_per_token, is_int8, parameter_bytes, weights_of

    fp32, bf16, int8 = (tiny_formats[w].model for w in ("fp32", "bf16", "int8"))
    stored = {w: storage_bytes(m) for w, m in (("fp32", fp32), ("bf16", bf16), ("int8", int8))}
    assert {w: parameter_bytes(m) for w, m in (("fp32", fp32), ("bf16", bf16), ("int8", int8))} == stored
    assert stored["int8"] < stored["fp32"] and stored["bf16"] * 2 == stored["fp32"]
    # the tiny model is mostly its float32 embeddings; only the blocks shrink 4x
    blocks = {w: storage_bytes(m.model.layers) for w, m in (("fp32", fp32), ("int8", int8))}
    assert 3 < blocks["fp32"] / blocks["int8"] < 4  # int8 data and a scale per row; the norms stay float32
    q = int8.model.layers[0].self_attn.q_proj.weight
    assert is_int8(q) and q.qdata.shape == fp32.model.layers[0].self_attn.q_proj.weight.shape
    assert not is_int8(int8.lm_head.weight) and int8.lm_head.weight is int8.model.embed_tokens.weight  # still tied
    assert bytes_per_token(fp32) == stored["fp32"]  # tied: the head is the embeddings, read whole each step
    assert bytes_per_token(int8) == stored["int8"] < bytes_per_token(fp32)
    assert [weights_of(m) for m in (fp32, bf16, int8)] == ["fp32", "bf16", "int8"]


def test_the_plain_decoder_runs_each_format_close_to_its_hf_forward(tiny_formats):
    """The plain path's int8 projection (torch's int8 GEMV, bf16 activations) against the same model's HF
    forward (torchao, float32 activations): the same weights, so only rounding apart."""
    import torch

    from pipeline.model.decoders.factory import open_decoder

    ids = tiny_formats["fp32"].tokenizer(DEFAULT_QUESTION)["input_ids"]
    for weights, lm in tiny_formats.items():
        dec = open_decoder(lm, len(ids) + 2)
        dec.prefill(ids[:-1])
        step = dec.step(ids[-1])
        hf = lm.forward([ids], logits_to_keep=1).logits[0, -1].float()
        assert step.dtype == torch.float32
        if weights == "fp32":  # the same float32 weights: float32 rounding apart (kit.tolerance)
            tolerance = float(logits_tolerance(lm, ids).max())
        else:  # bf16 activations (8 bits of mantissa, 2^-9 relative) or int8 weights: 5 % of the largest score
            tolerance = 0.05 * float(hf.abs().max())
        assert (step - hf).abs().max() <= tolerance, weights


def storage_bytes(module) -> int:
    """Bytes of the distinct storages under a module's parameters (an int8 weight: its data and scales)."""
    storages = {}
    for p in module.parameters():
        for t in (p.qdata, p.scale) if hasattr(p, "qdata") else (p,):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


@pytest.mark.parametrize("bad", ["int4", "FP32", "", None, 8])
def test_a_weights_value_not_offered_is_refused_naming_the_field(bad):
    from pipeline.stages.request import ChatRequest

    with pytest.raises(InputError) as e:
        ChatRequest.from_question(DEFAULT_QUESTION, weights=bad)
    assert e.value.field == "weights"
    with pytest.raises(InputError):
        check_weights(bad)


def test_the_run_key_holds_the_weights():
    from pipeline.stages.request import ChatRequest
    from views.request.session import request_key

    keys = {request_key(ChatRequest.from_question(DEFAULT_QUESTION, weights=w)) for w in WEIGHT_FORMATS}
    assert len(keys) == len(WEIGHT_FORMATS)


def test_the_cli_refuses_a_weights_value_before_loading(tmp_path):
    from kit.cli import run_cli

    code, _out, err = run_cli(tmp_path, "trace", DEFAULT_QUESTION, "--weights", "int4")  # no usable weights cache
    assert code == 2
    assert "weights" in err


def test_int8_kv_vectors_round_within_half_a_step_and_take_their_bytes():
    import numpy as np

    from pipeline.model.kv_int8 import bytes_per_vector, dequantize, quantize

    x = np.random.default_rng(0).normal(size=(3, 40, 64)).astype(np.float32)
    x[1, 5] = 0  # an all-zero vector stays zero
    q, scale = quantize(x)
    assert q.dtype == np.int8 and scale.shape == (3, 40, 1) and np.abs(q).max() == 127
    assert np.all(np.abs(dequantize(q, scale) - x) <= scale / 2 + 1e-7)
    assert not dequantize(q, scale)[1, 5].any()
    assert (bytes_per_vector(64, 32), bytes_per_vector(64, 16), bytes_per_vector(64, 8)) == (256, 128, 68)


@pytest.mark.parametrize("window", [None, 5])
def test_the_kv_error_attention_is_torchs_attention(window):
    """attention() (numpy, used to measure the int8 cache's error) against torch's SDPA with grouped heads."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from pipeline.model.kv_int8 import attention

    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in ((6, 12, 8), (2, 12, 8), (2, 12, 8)))
    i, j = torch.arange(12)[:, None], torch.arange(12)[None, :]
    allowed = (j <= i) & ((i - j < window) if window else True)
    expected = F.scaled_dot_product_attention(*(torch.from_numpy(a)[None] for a in (q, k, v)), attn_mask=allowed,
                                              scale=0.3, enable_gqa=True)[0]
    assert_within(attention(q, k, v, window, 0.3), expected.numpy(),  # weights within attention_tolerance, so a
                  attention_tolerance(q, k, 0.3, 12) * np.abs(v).sum(1).max()  # mix within that x |v|, then its
                  + float32_tolerance(12, np.abs(v).max()), "attention")  # own sum of 12 weighted values


def test_the_int8_kv_cache_costs_little_attention_error_on_a_captured_run(tiny_app):
    from pipeline.model.kv_int8 import attention_error
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    trace = run_trace(ChatRequest.from_question(DEFAULT_QUESTION, options=GenerationOptions(max_new_tokens=1)),
                      tiny_app)
    p = trace.prefill
    error = attention_error(p.q_rot, p.k_rot, p.v, trace.dims)
    assert len(error.relative) == trace.dims.L and 0 < max(error.relative) < 0.02 and 0 < error.kv_rel < 0.01
    assert error.bytes_fp32 == trace.dims.kv_bytes(len(trace.ids), 4) and error.bytes_bf16 * 2 == error.bytes_fp32
    assert error.bytes_int8 == error.bytes_fp32 // 4 + 2 * trace.dims.L * trace.dims.Hkv * len(trace.ids) * 4


def app_at(**query):
    import os

    from kit.paths import ROOT
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = dict(query)
    return at


def test_the_link_carries_the_weights_both_ways_and_the_pages_say_them(tiny_app):
    at = app_at(weights="int8", max_new_tokens="2")
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="req_weights").value == "int8"
    assert any("Computed with **int8** weights" in c.value for c in at.caption)
    at.selectbox(key="req_weights").set_value("bf16").run()
    assert not at.exception, at.exception
    assert at.query_params["weights"] == "bf16"
    at.selectbox(key="req_weights").set_value("fp32").run()
    assert "weights" not in at.query_params  # the default stays out of the link
    assert not any("Computed with" in c.value for c in at.caption)


def test_a_weights_value_in_the_link_that_is_not_offered_is_a_note_and_fp32(tiny_app):
    at = app_at(weights="int4", max_new_tokens="2")
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="req_weights").value == "fp32"
    assert any("weights" in w.value and "not usable" in w.value for w in at.warning)


def test_the_faster_decode_page_measures_every_format(tiny_app, monkeypatch):
    from kit.apptest import page_app

    from views.pages.faster_decode import weights as faster_decode_weights

    monkeypatch.setattr(faster_decode_weights, "STEPS", 3)  # a tiny measurement: what the table holds is tested
    monkeypatch.setattr(faster_decode_weights, "REPEATS", 1)
    monkeypatch.setattr(faster_decode_weights, "PROMPTS", (DEFAULT_QUESTION,))
    at = page_app("faster_decode", req_max_new_tokens=2)
    at.run()
    assert not at.exception, at.exception
    assert any("int8 + scales" in m.label for m in at.metric)
    at.button(key="fd_measure").click().run()
    assert not at.exception, at.exception
    speed, quality = at.dataframe[0].value, at.dataframe[1].value  # two tables, each whole in the page's width
    assert list(speed["weights"]) == list(quality["weights"]) == ["fp32", "bf16", "int8"]
    assert len(speed.columns) <= 6 and len(quality.columns) <= 6  # ten columns in one ran past the right edge
    assert quality["KL vs fp32 (nats, mean)"][0] == "0.00e+00" and quality["greedy answer"][0] == "the same"
    advice = [m.value for m in at.markdown if "--weights bf16" in m.value]  # formats.bf16_advice of this measurement
    assert len(advice) == 1 and f"{speed[speed.columns[3]][1]:.1f} ms against" in advice[0], advice
    answers = at.expander[0]  # each answer under its format, its verdict and its length beside it
    assert "mid-sentence" in answers.label
    said = [m.value for m in answers.markdown]
    assert said[0] == "**fp32** (6 tokens): the same", said  # quality_rows' greedy answer: 2 x STEPS tokens
    assert all(v.startswith(f"**{w}** (") for w, v in zip(["fp32", "bf16", "int8"], said))
    assert len(answers.code) == 3 and all(c.value for c in answers.code)
    import re  # when it was measured: a result kept for everyone may be hours old (a walk found it said nothing)
    assert any(re.match(r"Measured at \d\d:\d\d on this machine, once for everyone", c.value) for c in at.caption)
