"""The plain serving path's decoder (pipeline.model.decoders.plain): exact row blocks, HF's logits and greedy tokens on
a tiny Llama and on SmolLM2, the end token, the two paths compared interleaved."""

import pytest
from kit.tolerance import abs_dot, assert_within, float32_tolerance, logits_tolerance, logits_with_tolerance

from pipeline.model.passes import PassCounter, counting_passes

# ---- the plain serving path's decoder (pipeline.model.decoders.plain) -------------------------------

PLAIN_STEPS = 48
LONG_NOTES = " ".join(f"Box {i} is {('red', 'green', 'blue', 'yellow')[i % 4]} and holds {i * 7 % 13} apples."
                      for i in range(60))  # ~730 tokens: the prompt runs in more than one prefill chunk


def _hf_greedy(lm, ids: list[int], n: int) -> list[int]:
    """Plain Hugging Face generate, greedy: the reference the plain path must match token for token."""
    import torch

    x = torch.tensor([ids], device=lm.device)
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n)
    return out[0, len(ids):].tolist()


def _request_ids(lm, question: str, n: int):
    from pipeline.stages.request import ChatRequest, GenerationOptions
    from pipeline.stages.tokens import tokenize_request

    request = ChatRequest.from_question(question, options=GenerationOptions(max_new_tokens=n))
    return request, tokenize_request(lm.tokenizer, request).ids


def test_plain_decoder_row_blocks_give_linear_s_exact_outputs_at_smollm2_shapes():
    """The decoder runs each projection as a bmm over row blocks of the weight (both cores read it);
    at SmolLM2's shapes one block is F.linear's result to the bit, and more blocks the same dot products
    within float32 rounding (kit.tolerance: d terms each; another kernel may add them in another order)."""
    import torch
    import torch.nn.functional as F

    from pipeline.model.decoders.plain import project, row_blocks

    g = torch.Generator().manual_seed(0)
    for n, d in ((576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576)):  # q/o, k/v, gate/up, down, head
        w, x = torch.randn(n, d, generator=g), torch.randn(1, d, generator=g)
        reference = F.linear(x, w)
        assert torch.equal(project(x, row_blocks(w, 1)), reference)  # one block: the Linear itself
        tol = float32_tolerance(d, 1.0) * abs_dot(x.numpy(), w.numpy())  # (1, n)
        for k in (2, 3):  # the same dot products, maybe another kernel's order
            assert_within(project(x, row_blocks(w, k)), reference, tol, f"{(n, d, k)}")
    assert row_blocks(torch.zeros(7, 4), 2).shape == (1, 4, 7)  # rows that do not divide: one block


def test_plain_decoder_follows_hf_on_a_tiny_llama(tokenizer, tiny_lm):
    """Random weights, no model files: the decoder's logits follow HF's full forward step by step, a
    model it does not cover (q/k/v biases) is decoded by HF's forward behind the same interface, and
    a step past the positions it was sized for is refused."""
    import torch
    from kit.tiny_models import make_tiny_lm

    from pipeline.model.decoders.factory import open_decoder
    from pipeline.model.decoders.plain import HFDecoder, PlainDecoder

    ids = tokenizer("Are tomatoes fruit? Yes, botanically they are.")["input_ids"]
    steps = 12
    for lm, kind in ((tiny_lm, PlainDecoder), (make_tiny_lm(tokenizer, attention_bias=True), HFDecoder)):
        decoder = open_decoder(lm, len(ids) + steps)
        assert type(decoder) is kind
        seq, logits = list(ids), decoder.prefill(ids)
        for _ in range(steps):
            with torch.inference_mode():
                x = torch.tensor([seq], device=lm.device)
                full = lm.model(input_ids=x).logits[0, -1]  # (V,) the whole sequence again
            assert_within(logits, full, logits_tolerance(lm, seq), f"{kind.__name__} at {len(seq)}")
            seq.append(int(logits.argmax()))
            logits = decoder.step(seq[-1])
    plain = PlainDecoder(tiny_lm, len(ids) + 1)
    plain.prefill(ids)
    plain.step(5)
    with pytest.raises(ValueError):
        plain.step(5)


@pytest.mark.model
def test_plain_decoder_logits_match_hf_full_forward(lm):
    """At several decode steps (a short prompt, and one prefilled in several chunks) the decoder's
    logits equal HF's forward over the whole sequence, and each step counts one forward pass."""
    import torch

    from pipeline.model.decoders.plain import PlainDecoder, supports

    assert supports(lm.model)  # SmolLM2 runs on PlainDecoder, not on the HF fallback
    for question, checked in (("Are tomatoes fruit?", (1, 2, 9, 30)),
                              (LONG_NOTES + " Describe every box above, one per line.", (1, 5, 20))):
        _, ids = _request_ids(lm, question, 64)
        n = max(checked) + 1
        decoder = PlainDecoder(lm, len(ids) + n)
        seq, logits = list(ids), decoder.prefill(ids)
        for step in range(n):
            if step in checked:
                with lm.lock, torch.inference_mode():
                    full, tol = logits_with_tolerance(lm, seq)  # (V,) both, from one pass over the sequence
                assert_within(logits, full, tol, f"step {step}")
            seq.append(int(logits.argmax()))
            with counting_passes(PassCounter()) as mine:  # this thread's passes (a warm-up may share the model)
                logits = decoder.step(seq[-1])
            assert mine.n == 1


@pytest.mark.model
@pytest.mark.parametrize("question, long_prompt", [("Are tomatoes fruit?", False), ("토마토는 과일이야?", False),
                                                    (LONG_NOTES + " Describe every box above, one per line.", True)],
                         ids=["default", "korean", "longer-than-a-prefill-chunk"])
def test_plain_path_greedy_tokens_equal_hf_generate(lm, question, long_prompt):
    from pipeline.faster.fast_path import generate
    from pipeline.model.prefill import PREFILL_CHUNK

    request, ids = _request_ids(lm, question, PLAIN_STEPS)
    assert (len(ids) > PREFILL_CHUNK) == long_prompt
    plain = generate(lm, request)
    assert plain.generated == _hf_greedy(lm, ids, PLAIN_STEPS)
    assert len(plain.generated) == PLAIN_STEPS and plain.finish_reason == "length"  # every step was compared


@pytest.mark.model
def test_plain_path_stops_at_the_end_token(lm):
    from pipeline.faster.fast_path import stream
    from pipeline.stages.generation import end_token_ids

    request, ids = _request_ids(lm, "Reply with one word: what colour is the sky?", 64)
    events = list(stream(lm, request))
    done, eos = events[-1], end_token_ids(lm)
    assert done.finish_reason == "eos" and done.token_ids[-1] in eos and len(done.token_ids) < 64
    assert not eos & set(done.token_ids[:-1])
    assert list(done.token_ids) == _hf_greedy(lm, ids, 64)  # HF stops at the same end token
    assert "".join(e.delta for e in events) == done.text
    assert lm.tokenizer.decode(done.token_ids[-1]) not in done.text


@pytest.mark.model
def test_comparing_the_two_paths_measures_both_interleaved_on_the_same_tokens(lm):
    from pipeline.core.errors import InputError
    from pipeline.run.compare_paths import compare_with_captured
    from pipeline.stages.request import ChatRequest, GenerationOptions

    result = compare_with_captured(lm, ChatRequest.from_question("Are tomatoes fruit?"), steps=8, repeats=2)
    c = result["comparison"]
    assert result["steps"] == 8 and result["same_tokens"] and c.repeats == 2
    assert c.a_range[0] <= c.a_median <= c.a_range[1] and c.b_range[0] <= c.b_median <= c.b_range[1]
    assert 0.005 < c.a_median < 5 and 0.005 < c.b_median < 5  # real seconds per token, not a placeholder
    with pytest.raises(InputError, match="fewer than 3 tokens"):
        compare_with_captured(lm, ChatRequest.from_question("Hi", options=GenerationOptions(max_new_tokens=2)))
