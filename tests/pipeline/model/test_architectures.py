"""The capture on tiny random-weight models of four architectures, built here with the real tokenizers
(no weights downloaded or loaded): Llama with grouped-query attention, Llama with one key/value head per
query head (multi-head), Qwen2 with biases on q/k/v, and Gemma 3 with sliding-window layers,
`layer_types`, QK-norm, four norms per block and a RoPE base per layer type. For each: the hook names,
every captured shape from the model's own dims, the residual stream adding up, the last logits equal
to a plain forward pass, and the attention weights equal to softmax(q k^T) recomputed from the captured
queries and keys (with the sliding window where there is one). An architecture the capture does not
know is refused with an InputError naming what it lacks.
"""
import json

import numpy as np
import pytest
import torch
from kit.tiny_models import TEXT, WINDOW, tiny_gemma3, tiny_llama, wrap
from kit.tolerance import (U32, additions_tolerance, assert_same_best, assert_within, attention_tolerance,
                           lens_tolerance, logits_tolerance)

from pipeline.core.errors import InputError
from pipeline.model.capture import Gemma3Layout, LlamaLayout, capture, hook_points, layout_for
from pipeline.model.dims import SLIDING
from pipeline.model.prefill import run_prefill, top_per_position
from pipeline.model.registry import GEMMA3
from pipeline.model.weights_cache import weights_cache_dir
from pipeline.stages.layers import logit_lens


def tiny_qwen2(tokenizer):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                                         max_position_embeddings=512, attn_implementation="sdpa"))
    with torch.no_grad():  # random biases, so that a capture which dropped them would differ
        for block in model.model.layers:
            for proj in (block.self_attn.q_proj, block.self_attn.k_proj, block.self_attn.v_proj):
                proj.bias.normal_()
    return model


def windowed_attention(q, k, scale, window):
    """(H, T, Dh), (Hkv, T, Dh) -> (H, T, T) in float64: softmax over the keys j with i - window < j <= i."""
    H, T, _ = q.shape
    kk = np.repeat(k, H // k.shape[0], axis=0)  # each key/value head read by H // Hkv query heads
    scores = np.einsum("htd,hsd->hts", q, kk) * scale
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    allowed = (j <= i) & ((i - j < window) if window else True)
    scores = np.where(allowed, scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def check_capture(lm, layout, scale):
    ids = lm.tokenizer(TEXT)["input_ids"]
    T, d = len(ids), lm.dims
    assert layout_for(lm.model) is layout
    p = run_prefill(lm, ids).prefill
    assert p.embeddings.shape == (T, d.D) and p.hidden_states.shape == (d.L + 1, T, d.D)
    assert p.attn_out.shape == p.mlp_out.shape == (d.L, T, d.D) and p.final_norm.shape == (T, d.D)
    assert p.q_rot.shape == (d.L, d.H, T, d.Dh) and p.k_rot.shape == p.v.shape == (d.L, d.Hkv, T, d.Dh)
    assert p.attention.shape == (d.L, d.H, T, T) and p.last_logits.shape == (d.V,)
    # each block's two float32 additions to the stream, each rounded to nearest: half an ulp of each result
    h = p.hidden_states.astype(np.float64)
    tol = additions_tolerance(p.hidden_states[:-1] + p.attn_out, p.hidden_states[1:])
    assert_within(h[1:], h[:-1] + p.attn_out + p.mlp_out, tol, "the stream adds up")
    with torch.inference_mode():
        full = lm.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        rows = lm.model.get_input_embeddings()(torch.tensor(ids))  # (T, D), Gemma's scaled by sqrt(D)
    assert_within(p.last_logits, full.numpy(), logits_tolerance(lm, ids), "last logits against a plain pass")
    assert_within(p.embeddings, rows.numpy(), 2 * U32 * np.abs(rows.numpy()), "embeddings")  # Gemma's one scaling
    lens_ids, _ = logit_lens(lm, p.hidden_states, k=1)  # the final norm applied by hand: the model's own top ids
    top_ids, top_logits, _ = top_per_position(lm, p.final_norm)
    assert_same_best(lens_ids[-1, :, 0], top_ids[:, 0], top_logits[:, :2], lens_tolerance(lm, p.final_norm), "lens")
    for i in range(d.L):
        want = windowed_attention(p.q_rot[i].astype(np.float64), p.k_rot[i].astype(np.float64), scale, d.window(i))
        assert_within(p.attention[i], want, attention_tolerance(p.q_rot[i], p.k_rot[i], scale, T), f"layer {i}")
    return p


PER_BLOCK = ["q", "k", "v", "attention", "attn_out", "mlp_out", "hidden_states"]


@pytest.mark.parametrize("kind", ["gqa", "multi-head", "qwen2-bias"])
def test_llama_shaped_capture(tokenizer, kind):
    model = {"gqa": lambda: tiny_llama(tokenizer), "multi-head": lambda: tiny_llama(tokenizer, num_key_value_heads=4),
             "qwen2-bias": lambda: tiny_qwen2(tokenizer)}[kind]()
    lm = wrap(model, tokenizer, f"tiny-{kind}")
    assert list(hook_points(lm.model)) == ["embeddings", "rope.cos", "rope.sin"] + [
        f"blocks.{i}.{n}" for i in range(lm.dims.L) for n in PER_BLOCK] + ["final_norm"]
    assert lm.dims.group == (1 if kind == "multi-head" else 2) and lm.dims.window(0) is None
    check_capture(lm, LlamaLayout, lm.dims.Dh ** -0.5)


def test_gemma3_capture_with_sliding_layers(gemma_tokenizer):
    lm = wrap(tiny_gemma3(gemma_tokenizer), gemma_tokenizer, "tiny-gemma3")
    d = lm.dims
    assert (d.architecture, d.H, d.Hkv, d.sliding_window, d.qk_norm) == ("gemma3_text", 4, 1, WINDOW, True)
    assert [d.window(i) for i in range(d.L)] == [WINDOW, WINDOW, None]
    assert [d.rope_base_of(i) for i in range(d.L)] == [10_000.0, 10_000.0, 1_000_000.0]
    assert d.embedding_scale == pytest.approx(32 ** 0.5) and d.V == 262_144
    names = list(hook_points(lm.model))
    assert names == ["embeddings", "rope.full_attention.cos", "rope.full_attention.sin", "rope.sliding_attention.cos",
                     "rope.sliding_attention.sin"] + [
        f"blocks.{i}.{n}" for i in range(d.L) for n in PER_BLOCK] + ["final_norm"]
    p = check_capture(lm, Gemma3Layout, 16 ** -0.5)
    T = p.T
    assert T > 2 * WINDOW
    back = np.arange(T)[:, None] - np.arange(T)[None, :]  # how far back each key lies from its query
    assert np.all(p.attention[:2][..., back >= WINDOW] == 0)  # sliding layers: nothing past the window
    assert np.all(p.attention[2][..., back >= WINDOW].sum(-1) > 0)  # the full layer reaches back further
    with capture(lm, ["rope.sliding_attention.cos", "rope.full_attention.cos"]) as rec:
        lm.forward([[2, 3, 4]])
    assert len(rec["rope.sliding_attention.cos"]) == len(rec["rope.full_attention.cos"]) == 1  # one call per type
    assert not torch.equal(rec["rope.sliding_attention.cos"][0], rec["rope.full_attention.cos"][0])


def test_dims_from_gemmas_config_file():
    """The real Gemma config (the file beside the converted weights), read as the app's handle reads it."""
    from types import SimpleNamespace

    from pipeline.model.dims import ModelDims

    path = weights_cache_dir(GEMMA3) / "config.json"
    if not path.exists():
        pytest.skip("Gemma is not converted yet: ./run.sh converts it")
    d = ModelDims.from_config(SimpleNamespace(**json.loads(path.read_text())), "Gemma-3-270M", "float32", "")
    assert (d.L, d.H, d.Hkv, d.Dh, d.D, d.V, d.context_window) == (18, 4, 1, 256, 640, 262_144, 32_768)
    assert [i for i in range(d.L) if d.window(i) is None] == [5, 11, 17] and d.window(0) == 512
    assert (d.rope_base_of(0), d.rope_base_of(5)) == (10_000.0, 1_000_000.0)
    assert d.to_json()["layer_types"].count(SLIDING) == 15


def test_an_unknown_architecture_is_refused_naming_what_is_missing(tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = wrap(GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2)),
                tokenizer, "tiny-gpt2")
    with pytest.raises(InputError) as err:
        run_prefill(gpt2, [1, 2, 3])
    assert err.value.field == "model" and "'gpt2'" in str(err.value) and "model.embed_tokens" in str(err.value)


def test_a_llama_named_model_with_gemma_blocks_is_refused(tokenizer):
    """Gemma 2's blocks have the extra MLP norms: the Llama-shaped capture would miss them, so it says so."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    model = Gemma2ForCausalLM(Gemma2Config(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                           intermediate_size=48))
    with pytest.raises(InputError, match="pre_feedforward_layernorm"):
        layout_for(model)


def test_gemma_turn_format_and_plain_text(gemma_tokenizer):
    """Gemma's file has no chat template: ours writes its published turns; its markers are special tokens of
    the tokenizer, a user typing them gets plain text; plain mode sends BOS and the text, nothing else."""
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    tok = gemma_tokenizer
    special = {t.content: i for i, t in tok.added_tokens_decoder.items() if t.special}
    assert {"<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"} <= set(special)
    chat = tokenize_request(tok, ChatRequest.from_question("Are tomatoes fruit?", system="Be brief."))
    assert chat.prompt_text == ("<bos><start_of_turn>user\nBe brief.\n\nAre tomatoes fruit?<end_of_turn>\n"
                                "<start_of_turn>model\n")
    assert chat.ids[:2] == [tok.bos_token_id, special["<start_of_turn>"]]
    assert chat.ids.count(special["<end_of_turn>"]) == 1
    markers = [t for t in chat.tokens if t.role == "template" and t.text in ("<start_of_turn>", "<end_of_turn>")]
    assert len(markers) == 3 and all(t.special for t in markers)  # named special at load: every page marks them
    from pipeline.model.vocabulary import Vocabulary

    assert Vocabulary.from_folder(weights_cache_dir(GEMMA3), GEMMA3.turn_tokens).all_special_ids == tok.all_special_ids
    history = ChatRequest.from_question("And cucumbers?", history=[("user", "Hi"), ("assistant", "Hello!")])
    assert "<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nAnd cucumbers?" in tokenize_request(
        tok, history).prompt_text  # the assistant's turns are the model's
    typed = tokenize_request(tok, ChatRequest.from_question("say <end_of_turn> now"))
    assert typed.ids.count(special["<end_of_turn>"]) == 1  # only the template's own marker is the control token
    plain = tokenize_request(tok, ChatRequest.from_question("The capital of France is", prompt_format="plain"))
    assert plain.prompt_text == "<bos>The capital of France is"
    assert plain.ids == [tok.bos_token_id] + tok("The capital of France is", add_special_tokens=False)["input_ids"]
    with pytest.raises(InputError, match="prompt_format"):
        ChatRequest.from_question("x", prompt_format="markdown")


def test_gemma_stops_at_end_of_turn(gemma_tokenizer):
    from pipeline.model.loader import add_stop_tokens
    from pipeline.stages.generation import end_token_ids

    lm = wrap(tiny_gemma3(gemma_tokenizer), gemma_tokenizer, "tiny-gemma3")
    add_stop_tokens(lm.model, gemma_tokenizer, GEMMA3.stop_tokens)
    end_of_turn = gemma_tokenizer.convert_tokens_to_ids("<end_of_turn>")
    assert end_token_ids(lm) == {gemma_tokenizer.eos_token_id, end_of_turn}
    with pytest.raises(InputError, match="no '<im_nope>' token"):
        add_stop_tokens(lm.model, gemma_tokenizer, ("<im_nope>",))


def test_the_plain_serving_path_decodes_gemma_with_its_own_decoder(gemma_tokenizer):
    """Gemma 3 gets its own plain decoder (Gemma's block from the weights, a sliding window over its
    preallocated cache); its steps follow HF's full forward past the window, and a Gemma it does not
    cover (soft-capped logits) is decoded by HF's forward behind the same interface."""
    from pipeline.model.decoders.factory import open_decoder
    from pipeline.model.decoders.gemma import GemmaPlainDecoder
    from pipeline.model.decoders.plain import HFDecoder

    lm = wrap(tiny_gemma3(gemma_tokenizer), gemma_tokenizer, "tiny-gemma3")
    ids = gemma_tokenizer(TEXT)["input_ids"]
    decoder = open_decoder(lm, len(ids) + 4)
    assert isinstance(decoder, GemmaPlainDecoder)
    logits = decoder.prefill(ids)
    for _ in range(4):  # past the window of 4 already: each sliding layer reads only its last 4 positions
        ids.append(int(logits.argmax()))
        logits = decoder.step(ids[-1])
        with torch.inference_mode():
            full = lm.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        assert_within(logits, full, logits_tolerance(lm, ids), f"step {len(ids)}")
    with pytest.raises(ValueError, match="does not fit"):
        decoder.step(1)
    capped = tiny_gemma3(gemma_tokenizer)
    capped.config.final_logit_softcapping = 30.0
    assert isinstance(open_decoder(wrap(capped, gemma_tokenizer, "capped"), 8), HFDecoder)


def test_batched_answers_on_gemma_past_its_window(gemma_tokenizer):
    """Requests decoded together: within the window their caches join into one batch; past it a sliding
    layer keeps fewer positions than the request holds, so each is decoded on its own. Either way every
    answer equals the request run alone."""
    from pipeline.run.trace import run_trace, run_traces
    from pipeline.stages.request import ChatRequest, GenerationOptions

    lm = wrap(tiny_gemma3(gemma_tokenizer), gemma_tokenizer, "tiny-gemma3")
    requests = [ChatRequest.from_question(q, options=GenerationOptions(max_new_tokens=5)) for q in ("Hi", TEXT)]
    together = run_traces(requests, lm)
    assert [t.generated_token_ids for t in together] == [run_trace(r, lm).generated_token_ids for r in requests]


def test_a_branch_on_gemma_replays_the_real_cache_bytes(gemma_tokenizer):
    """What if, on a model whose sliding layers keep only their window: the replayed steps before the
    branch report the bytes the real cache held at each step, as the run itself recorded them."""
    from pipeline.run.trace import branch_trace, run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    lm = wrap(tiny_gemma3(gemma_tokenizer), gemma_tokenizer, "tiny-gemma3")
    trace = run_trace(ChatRequest.from_question(TEXT, options=GenerationOptions(max_new_tokens=5)), lm)
    branched = branch_trace(trace, 3, trace.generated_token_ids[3], lm)
    assert branched.generated_token_ids == trace.generated_token_ids
    assert [s.kv_bytes_per_layer for s in branched.steps] == [s.kv_bytes_per_layer for s in trace.steps]
    assert len(set(trace.steps[0].kv_bytes_per_layer)) == 2  # sliding and full layers hold different amounts


def test_the_prefix_cache_on_gemma(gemma_tokenizer):
    """Blocks of keys and values reused across requests give a full pass's logits, within the sliding window
    and past it (HF's own cache drops positions past the window; the prefix engine's keeps them all)."""
    from pipeline.prompt_cache.engine import PrefixCache, PrefixCacheConfig

    model = tiny_gemma3(gemma_tokenizer)
    model.config.sliding_window = 64  # longer than the prompts below: every layer holds every position
    for block in model.model.layers:
        block.self_attn.sliding_window = 64 if block.self_attn.sliding_window else None
    lm = wrap(model, gemma_tokenizer, "tiny-gemma3")
    ids = gemma_tokenizer(TEXT)["input_ids"]
    cache = PrefixCache(PrefixCacheConfig(block_size=4))
    cold = cache.serve(lm, ids)
    warm = cache.serve(lm, ids + [236881])
    assert warm.stats.tokens_reused == len(ids) // 4 * 4 and cold.stats.tokens_reused == 0
    with torch.inference_mode():
        full = lm.model(input_ids=torch.tensor([ids + [236881]]), use_cache=False).logits[0, -1]
    assert_within(warm.last_logits, full, logits_tolerance(lm, ids + [236881]), "reused blocks")
    # past the window (4 positions here): the engine's caches keep every position, the model still applies
    # the window, so reused blocks give the logits of a full pass too
    short_window = wrap(tiny_gemma3(gemma_tokenizer), gemma_tokenizer, "tiny-gemma3")
    assert len(ids) > 4
    cache = PrefixCache(PrefixCacheConfig(block_size=4))
    cache.serve(short_window, ids)
    warm = cache.serve(short_window, ids + [236881])
    assert warm.stats.tokens_reused == len(ids) // 4 * 4
    with torch.inference_mode():
        full = short_window.model(input_ids=torch.tensor([ids + [236881]]), use_cache=False).logits[0, -1]
    assert_within(warm.last_logits, full, logits_tolerance(short_window, ids + [236881]), "past the window")


def test_gemma_byte_fallback_pieces_group_into_their_character(gemma_tokenizer, tokenizer):
    """Gemma spells a character outside its vocabulary as UTF-8 bytes, one '<0xEB>' token each: the pages show
    the character they make ('똠', three tokens), not three raw '<0x..>' names."""
    from pipeline.text.byte_level import BYTE_FALLBACK
    from pipeline.text.pieces import spelled, token_pieces

    text = "똠 𝕓"
    ids = gemma_tokenizer.encode(text, add_special_tokens=False)
    names = gemma_tokenizer.convert_ids_to_tokens(ids)
    assert sum(bool(BYTE_FALLBACK.fullmatch(n)) for n in names) == 7  # 똠: 3 bytes, 𝕓: 4 bytes
    pieces = token_pieces(gemma_tokenizer, ids)
    assert gemma_tokenizer.decode(ids) == text
    assert {p.group_text for p in pieces if p.partial} == {"똠", "𝕓"}
    assert spelled(pieces).replace("␣", " ") == text
    assert [p.parts for p in pieces if p.group_text == "똠"] == [3, 3, 3]
    # the rule reads '<0x..>' as a byte; no byte-level BPE token of SmolLM2 is spelled that way
    assert not [t for t in tokenizer.get_vocab() if BYTE_FALLBACK.fullmatch(t)]
