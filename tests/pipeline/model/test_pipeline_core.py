"""Invariants of the pipeline core, checked on the real model against references outside our code."""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from kit.cli import run_cli
from kit.tolerance import (assert_within, attention_tolerance, float32_tolerance, forward_tolerance,
                           logits_tolerance, scale, unembedding_magnitude)

from pipeline.model.capture import capture
from pipeline.model.dims import kv_bytes_formula
from pipeline.model.kv_tensors import cache_layers
from pipeline.model.loader import attention_implementation
from pipeline.model.prefill import _heads, run_prefill
from pipeline.model.prefill_record import FULL_ATTENTION_MAX_TOKENS
from pipeline.model.rope import rotate, signed_sin
from pipeline.run.trace import run_trace
from pipeline.stages.attention import attention_for_layer
from pipeline.stages.batch import batch_tensors
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.stages.tokens import tokenize_request

pytestmark = pytest.mark.model

PROMPTS = {
    "english": "Are tomatoes fruit?",
    "korean": "토마토는 과일이야?",
    "code": "Write a Python function that returns the square of x.",
}


def _trace(lm, question, **opts):
    opts.setdefault("max_new_tokens", 12)
    return run_trace(ChatRequest.from_question(question, options=GenerationOptions(**opts)), lm)


def hf_greedy(lm, ids: list[int], n: int) -> list[int]:
    """Hugging Face's own generate, greedy: the reference for our decode loop."""
    t = torch.tensor([ids], device=lm.device)
    with torch.inference_mode():
        ref = lm.model.generate(t, attention_mask=torch.ones_like(t), do_sample=False, max_new_tokens=n)
    return ref[0, t.shape[1]:].tolist()


@pytest.mark.parametrize("name", list(PROMPTS))
def test_greedy_loop_equals_hf_generate(lm, name):
    trace = _trace(lm, PROMPTS[name], max_new_tokens=16)
    assert trace.generated_token_ids == hf_greedy(lm, trace.ids, 16)


def test_default_trace_equals_hf_generate(lm, default_trace):
    n = len(default_trace.generated_token_ids)
    assert default_trace.finish_reason == "eos"  # the default answer ends by itself, within max_new_tokens
    assert default_trace.generated_token_ids == hf_greedy(lm, default_trace.ids, n)


def test_kv_cache_logits_equal_full_forward(lm, default_trace):
    t = default_trace
    full_ids = t.ids + t.generated_token_ids[:-1]  # the sequence the last step was scored on
    with torch.inference_mode():
        ref = lm.model(input_ids=torch.tensor([full_ids], device=lm.device), use_cache=False).logits[0, -1]
    cached = torch.from_numpy(t.step_logits[-1])
    assert_within(cached, ref.float().cpu(), logits_tolerance(lm, full_ids), "cached decode against a full pass")


def test_k_rot_rebuilt_from_projection_and_rope_equals_cache(lm, default_trace):
    """Our RoPE on the hooked key projection reproduces what the model stored in its cache."""
    t = default_trace
    with capture(lm, ["blocks.3.k", "rope.cos", "rope.sin"]) as rec:
        lm.forward([t.ids], use_cache=False)
    k = _heads(rec["blocks.3.k"][0].float().cpu(), t.dims.Hkv)  # (Hkv, T, Dh)
    cos, sin = rec["rope.cos"][0][0].float().cpu(), rec["rope.sin"][0][0].float().cpu()  # (T, Dh)
    # the hooked pass and the trace's prefill: keys after 3 blocks, the input norm and the projection
    tol = forward_tolerance(t.dims, scale(t.prefill.k_rot[3]), len(t.ids), layers=4)
    assert_within(rotate(k, cos, signed_sin(sin)).numpy(), t.prefill.k_rot[3], tol, "keys rebuilt")


def test_attention_rows_sum_to_one_and_are_causal(default_trace):
    att = default_trace.prefill.attention  # (L, H, T, T)
    assert att.shape[:2] == (30, 9)
    T = att.shape[-1]
    assert_within(att.sum(-1), 1.0, float32_tolerance(T, 1.0, depth=2), "rows' sums")  # softmax's sum, then ours
    assert np.all(att[..., np.triu(np.ones((T, T), dtype=bool), k=1)] == 0)


def test_attention_recomputed_from_q_k_matches_model(default_trace):
    p = default_trace.prefill
    without = replace(p, attention=None)
    for layer in (0, 14, 29):  # the same q and k, another kernel's scores and softmax
        tol = attention_tolerance(p.q_rot[layer], p.k_rot[layer], p.q_rot.shape[-1] ** -0.5, p.q_rot.shape[-2])
        assert_within(attention_for_layer(without, layer), p.attention[layer], tol, f"layer {layer}")
        assert_within(attention_for_layer(without, layer, first_row=5), p.attention[layer][:, 5:], tol,
                      f"layer {layer} from row 5")


def test_hidden_states_match_embeddings_and_hf(lm, default_trace):
    t = default_trace
    p = t.prefill
    table = lm.model.get_input_embeddings().weight.detach().cpu().numpy()
    np.testing.assert_array_equal(p.hidden_states[0], table[t.ids])
    # HF's own hidden states, with the kernel the capture used (eager and SDPA round differently, ~1e-6
    # relative, which on the model's largest activations, ~160, exceeds 1e-4 absolute); another pass: within
    # float32 rounding of the blocks before each state (kit.tolerance), on the stream's own scale
    with attention_implementation(lm.model, "eager"), torch.inference_mode():
        out = lm.model(input_ids=torch.tensor([t.ids], device=lm.device), output_hidden_states=True,
                       use_cache=False)
    # (L+1, T, D); HF's last entry is after the final norm
    hf = torch.stack(out.hidden_states)[:, 0].float().cpu().numpy()
    T, L = len(t.ids), t.dims.L
    tol = np.array([forward_tolerance(t.dims, scale(hf[:-1]), T, layers=max(i, 1)) for i in range(L)])  # after i
    assert_within(p.hidden_states[:-1], hf[:-1], tol[:, None, None], "hidden states")
    assert_within(p.final_norm, hf[-1], forward_tolerance(t.dims, scale(hf[-1]), T, layers=L + 1), "final norm")


def test_final_norm_times_lm_head_gives_logits(lm, default_trace):
    p = default_trace.prefill
    with torch.inference_mode():
        normed = lm.model.model.norm(torch.from_numpy(p.hidden_states[-1]).to(lm.device))  # (T, D)
        logits = lm.model.get_output_embeddings()(normed)[-1]  # (V,)
    # the final norm (a mean over D) and the head (D terms) of the same stream, here and in the trace
    tol = float32_tolerance(lm.dims.D, 1.0, depth=2) * unembedding_magnitude(lm, p.final_norm[-1])
    assert_within(logits.float().cpu().numpy(), p.last_logits, tol, "logits from the final norm")
    from pipeline.model.prefill import top_per_position

    assert int(np.argmax(p.last_logits)) == top_per_position(lm, p.final_norm)[0][-1, 0]


def test_kv_bytes_follow_formula_and_grow_one_position_per_step(default_trace):
    m = default_trace.dims
    steps = default_trace.steps
    assert steps[0].kv_cache_tokens == len(default_trace.ids)
    for s in steps:
        expected = kv_bytes_formula(m.L, m.Hkv, m.Dh, s.kv_cache_tokens, 4)
        assert s.kv_cache_bytes == expected == m.kv_bytes(s.kv_cache_tokens)
        assert sum(s.kv_bytes_per_layer) == expected
    assert [b.kv_cache_tokens - a.kv_cache_tokens for a, b in zip(steps, steps[1:])] == [1] * (len(steps) - 1)


def test_kv_cache_keys_are_post_rope_keys(lm, default_trace):
    keys, values = cache_layers(run_prefill(lm, default_trace.ids).kv_cache)[7]
    p, T = default_trace.prefill, len(default_trace.ids)  # another pass: layer 7's input norm and projections
    assert_within(keys[0].cpu().numpy(), p.k_rot[7], forward_tolerance(lm.dims, scale(p.k_rot[7]), T, layers=8), "keys")
    assert_within(values[0].cpu().numpy(), p.v[7], forward_tolerance(lm.dims, scale(p.v[7]), T, layers=8), "values")


def test_streaming_events_rebuild_the_text(lm, default_trace):
    t = default_trace
    deltas = [e for e in t.events if e["event"] == "text_delta"]
    assert all(e["request_id"] == t.request.id for e in deltas)
    assert "".join(e["delta"] for e in deltas) == t.text
    assert t.text == lm.tokenizer.decode(t.generated_token_ids, skip_special_tokens=True)  # the tokenizer's own decode
    done = t.events[-1]
    assert done["event"] == "completed" and done["generated_token_ids"] == t.generated_token_ids
    assert done["usage"]["prompt_tokens"] == len(t.ids)
    assert done["usage"]["completion_tokens"] == len(t.generated_token_ids)
    assert [s["state"] for s in t.request.states] == ["queued", "prefill", "decoding", "completed"]
    assert t.cleanup.kv_tokens_released == len(t.ids) + len(t.generated_token_ids) - 1


@pytest.mark.parametrize("stop", [" to this", "yes, tom", "zzz"])
def test_streamed_deltas_never_include_a_cut_stop_string(lm, stop):
    trace = _trace(lm, "Are tomatoes fruit?", max_new_tokens=14, stop=(stop,))
    deltas = [e["delta"] for e in trace.events if e["event"] == "text_delta"]
    assert "".join(deltas) == trace.text == trace.events[-1]["text"]
    assert stop not in trace.text
    full = _trace(lm, "Are tomatoes fruit?", max_new_tokens=14)
    if stop in full.text:
        assert trace.finish_reason == "stop" and trace.text == full.text[:full.text.index(stop)]
    else:
        assert trace.finish_reason == "length" and trace.text == full.text


def test_long_prompt_is_captured_compactly_and_still_decodes(lm):
    kernel = lm.model.config._attn_implementation  # the kernel the model was loaded with
    trace = _trace(lm, "Tomatoes are fruit. " * 150, max_new_tokens=3)
    p = trace.prefill
    T = len(trace.ids)
    assert T > FULL_ATTENTION_MAX_TOKENS and p.attention is None and p.hidden_states.dtype == np.float16
    assert p.hidden_states.shape == (lm.dims.L + 1, T, lm.dims.D) and np.isfinite(p.hidden_states).all()
    row = attention_for_layer(p, 5)  # (H, T, T) recomputed from q and k
    assert_within(row.sum(-1), 1.0, float32_tolerance(T, 1.0, depth=2), "rows' sums")
    assert lm.model.config._attn_implementation == kernel == "sdpa"  # unchanged by the SDPA prefill
    _trace(lm, "Are tomatoes fruit?", max_new_tokens=1)  # a short prompt's prefill runs the eager kernel...
    assert lm.model.config._attn_implementation == kernel  # ...and puts the loaded one back
    assert len(trace.generated_token_ids) == 3


def test_finish_reasons(lm):
    assert _trace(lm, "Are tomatoes fruit?", max_new_tokens=3).finish_reason == "length"
    eos = _trace(lm, "Say just the word yes.", max_new_tokens=40)
    assert eos.finish_reason == "eos" and eos.generated_token_ids[-1] == lm.tokenizer.eos_token_id
    stop = _trace(lm, "Are tomatoes fruit?", max_new_tokens=30, stop=(" tomatoes",))
    assert stop.finish_reason == "stop" and " tomatoes" not in stop.text


def test_seeded_sampling_is_reproducible_and_top_k_1_is_greedy(lm, default_trace):
    a = _trace(lm, "Are tomatoes fruit?", max_new_tokens=8, temperature=1.2, seed=7)
    b = _trace(lm, "Are tomatoes fruit?", max_new_tokens=8, temperature=1.2, seed=7)
    assert a.generated_token_ids == b.generated_token_ids
    k1 = _trace(lm, "Are tomatoes fruit?", max_new_tokens=8, temperature=1.5, top_k=1, seed=3)
    assert k1.generated_token_ids == default_trace.generated_token_ids[:8]


def test_batch_padding_matches_single_requests(lm):
    seqs = [tokenize_request(lm.tokenizer, ChatRequest.from_question(q)).ids
            for q in ("Are tomatoes fruit?", "Hi", "2+2?")]
    t = batch_tensors(seqs, lm.tokenizer.pad_token_id)
    B, T = len(seqs), max(map(len, seqs))
    assert t["input_ids"].shape == (B, T) and t["input_ids"].dtype == torch.int64
    assert t["attention_mask"].sum(1).tolist() == [len(s) for s in seqs]
    assert t["position_ids"][1, -1].item() == len(seqs[1]) - 1
    out = lm.forward(t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"],
                     use_cache=False)
    batched = out.logits[:, -1].float().cpu()  # (B, V): the padded batch in one pass
    for b, seq in enumerate(seqs):
        with torch.inference_mode():
            single = lm.model(input_ids=torch.tensor([seq], device=lm.device), use_cache=False).logits[0, -1].cpu()
        tol = logits_tolerance(lm, seq)
        assert_within(batched[b], single, tol, f"padded row {b}")
        best = int(single.argmax())  # the same choice, unless another token is within rounding of it
        assert int(batched[b].argmax()) == best or batched[b].max() - batched[b][best] <= 2 * tol.max()


def test_json_has_documented_keys(default_trace):
    j = json.loads(json.dumps(default_trace.to_json()))
    for key in ("request", "prompt_text", "tokens", "model", "steps", "generated_token_ids", "text",
                "finish_reason", "timings", "events"):
        assert key in j
    assert set(j["model"]) >= {"name", "layers", "heads", "kv_heads", "head_dim", "hidden", "vocab", "dtype"}
    assert (j["model"]["layers"], j["model"]["heads"], j["model"]["kv_heads"]) == (30, 9, 3)
    assert set(j["steps"][0]) >= {"token_id", "token_text", "top", "kv_cache_tokens", "kv_cache_bytes", "seconds"}
    assert set(j["steps"][0]["top"][0]) >= {"id", "text", "logit", "prob", "prob_after_filters"}
    assert j["timings"]["ttft_s"] > 0 and j["timings"]["tpot_s"] > 0
    assert {t["role"] for t in j["tokens"]} == {"template", "user"}
    assert [s["role"] for s in j["segments"]].count("user") == 1
    assert "tensors" not in j
    assert j["request"]["anthropic"]["messages"][0]["role"] == "user"
    assert j["usage"]["total_tokens"] == len(default_trace.ids) + len(default_trace.generated_token_ids)
    assert j["text"] == default_trace.text and j["generated_token_ids"] == default_trace.generated_token_ids


def test_context_window_is_checked_against_the_real_model(lm):
    from pipeline.core.errors import InputError

    with pytest.raises(InputError) as err:
        _trace(lm, " a" * 9000)  # 9,000 tokens, 18,000 characters
    assert err.value.field == "messages" and "context window" in str(err.value)
    with pytest.raises(InputError) as err:
        _trace(lm, " a" * 8000, max_new_tokens=500)  # 8,030 prompt tokens + 500
    assert err.value.field == "max_new_tokens"


def test_odd_unicode_and_control_characters_run(lm):
    trace = _trace(lm, "Tomato\u200b\x07\u202e 🍅 \x00?", max_new_tokens=2)
    assert trace.generated_token_ids == hf_greedy(lm, trace.ids, 2)[:len(trace.generated_token_ids)]
    assert len(trace.generated_token_ids) == 2 or trace.finish_reason == "eos"
    assert all("\x00" not in t.text and "\x07" not in t.text for t in trace.tokens)


def test_cli_trace_writes_json(tmp_path, lm):
    out = tmp_path / "trace.json"
    code, printed, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--max-new-tokens", "3", "--json", str(out),
                                 real_weights=True)  # the model this run loaded (lm), as the process would load it
    assert code == 0, err
    assert "== 6. Decode" in printed
    j = json.loads(out.read_text())
    assert len(j["generated_token_ids"]) == 3 and j["finish_reason"] == "length"
    code, _out, err = run_cli(tmp_path, "trace", "Hi", "--top-p", "0")
    assert code == 2 and "top_p" in err, err


def test_loader_accepts_a_local_hf_folder(lm, default_trace):
    """Any local Hugging Face causal-LM folder loads; the converted weights cache is one."""
    from pipeline.model.loader import load_model
    from pipeline.model.weights_cache import weights_cache_dir

    other = load_model(str(weights_cache_dir()))
    assert other.name == weights_cache_dir().name and other.model is not lm.model
    trace = run_trace(ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=8)),
                      other)
    assert trace.generated_token_ids == default_trace.generated_token_ids[:8]
    with pytest.raises(ValueError, match="config.json"):
        load_model("/nonexistent-model-folder")
