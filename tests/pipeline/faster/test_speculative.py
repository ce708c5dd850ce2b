"""Speculative decoding (pipeline/speculative) on tiny random-weight models: the same greedy tokens as plain
decoding and as Hugging Face's generate, whether the drafts are all right, all wrong or found in the prompt;
the cache after a rollback holds what plain decoding's holds; an end token or a stop string inside accepted
drafts ends the answer where plain decoding ends it. Real weights: tests/pipeline/faster/test_speculative_model.py."""
import pytest
import torch
from kit.tiny_models import TEXT, tiny_gemma3, wrap
from kit.tolerance import assert_within, forward_tolerance, scale

from pipeline.core.errors import InputError
from pipeline.faster import fast_path
from pipeline.faster.speculative.drafts import prompt_lookup
from pipeline.faster.speculative.verify import SpeculativeDecoder
from pipeline.stages.generation import stream_answer
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.stages.tokens import tokenize_request

STEPS = 24


def test_prompt_lookup_proposes_what_followed_the_latest_copy_of_the_tail():
    assert prompt_lookup([5, 6, 7, 8, 5, 6], k=2) == [7, 8]
    assert prompt_lookup([1, 2, 9, 1, 2, 3, 1, 2], k=3) == [3, 1, 2]  # the latest copy of "1 2", not the first
    assert prompt_lookup([7, 1, 2, 8, 3, 1, 2, 9, 3, 1, 2], k=1) == [9]  # "3 1 2" (3 tokens) before "1 2"
    assert prompt_lookup([4, 5, 6], k=2) == [] and prompt_lookup([5, 6, 5], k=0) == []
    assert prompt_lookup([5, 6, 5], k=4) == [6, 5]  # no more than the context holds
    assert prompt_lookup([8, 1, 1, 1, 1, 1, 1], k=3) == [1, 1, 1]  # in a loop: a copy with 3 tokens after it


def ask(question: str, **options) -> ChatRequest:
    return ChatRequest.from_question(question, options=GenerationOptions(**{"max_new_tokens": STEPS, **options}))


def speculate(lm, req, draft=None, k=4, **answer_changes):
    """The answer decoded speculatively (drafts from `draft`, else the prompt), and its decoder."""
    answer, decoder = fast_path.open_answer(lm, req, speculate=k)
    if draft:
        decoder.draft = draft
    for name, value in answer_changes.items():
        setattr(answer, name, value)
    for _ in stream_answer(answer, decoder):
        pass
    return answer, decoder


def plain(lm, req, **answer_changes):
    answer, decoder = fast_path.open_answer(lm, req)
    for name, value in answer_changes.items():
        setattr(answer, name, value)
    events = list(stream_answer(answer, decoder))
    return answer, decoder, events


def oracle(tokens: list[int], prompt_len: int):
    """Drafts that are the plain answer's next tokens: the model accepts every one."""
    return lambda context, k: tokens[len(context) - prompt_len:][:k]


def wrong(context, k):
    """Drafts the model never chooses (its answers never hold id 0 here)."""
    return [0] * k


def hf_greedy(lm, ids: list[int], n: int) -> list[int]:
    x = torch.tensor([ids], device=lm.device)
    with torch.inference_mode():
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n)
    return out[0, len(ids):].tolist()


@pytest.fixture(scope="module")
def tiny_gemma(gemma_tokenizer):  # noqa: F811
    return wrap(tiny_gemma3(gemma_tokenizer), gemma_tokenizer, "tiny-gemma3")


@pytest.fixture(params=["llama", "gemma"])
def tiny(request, tiny_lm):
    """Each tiny model: SmolLM2's layout at a tiny width, and a Gemma 3 whose window (4) every prompt passes."""
    return tiny_lm if request.param == "llama" else request.getfixturevalue("tiny_gemma")


def test_speculative_greedy_equals_plain_and_hf_generate_whatever_the_drafts(tiny):
    req = ask(TEXT + " Say it again: " + TEXT)
    ids = tokenize_request(tiny.tokenizer, req).ids
    want, _, _ = plain(tiny, req)
    assert want.generated == hf_greedy(tiny, ids, STEPS)[:len(want.generated)]
    assert 0 not in want.generated  # so that `wrong` drafts are wrong
    for draft in (None, oracle(want.generated, len(ids)), wrong):
        got, decoder = speculate(tiny, req, draft)
        assert got.generated == want.generated and got.finish_reason == want.finish_reason
        assert got.text == want.text
        drafted = sum(len(r.drafts) for r in decoder.rounds)
        accepted = sum(r.accepted for r in decoder.rounds)
        if draft is wrong:
            assert drafted > 0 and accepted == 0 and len(decoder.rounds) == len(got.generated) - 1
        elif draft is not None:  # every draft right: k + 1 tokens per pass
            assert accepted == drafted > 0 and len(decoder.rounds) == -(-(len(got.generated) - 1) // 5)


def test_drafts_found_in_the_prompt_are_accepted_when_the_answer_repeats_itself(tiny_lm):
    """The tiny Llama falls into a loop on the default question: once the loop has gone round once, prompt
    lookup drafts the rest of it and the model accepts them."""
    req = ask("Are tomatoes fruit?", max_new_tokens=40)
    want, _, _ = plain(tiny_lm, req)
    got, decoder = speculate(tiny_lm, req)
    assert got.generated == want.generated
    assert sum(r.accepted for r in decoder.rounds) >= 8 and len(decoder.rounds) < len(got.generated) - 8


def test_a_rollback_leaves_the_cache_as_plain_decodings(tiny):
    """After rejected drafts the cache holds, at the answer's positions, what plain decoding's holds (the same keys
    and values to float tolerance: a verify pass multiplies n rows at once), and no more positions."""
    req = ask(TEXT)
    P = len(tokenize_request(tiny.tokenizer, req).ids)
    want, plain_decoder, _ = plain(tiny, req)
    for draft in (wrong, oracle(want.generated[:10] + [0] * 40, P)):  # all rejected; accepted, then rejected
        got, decoder = speculate(tiny, req, draft)
        assert got.generated == want.generated and sum(len(r.rejected) for r in decoder.rounds) > 0
        assert decoder.T == plain_decoder.T  # the last token chosen is never fed: both hold prompt + answer - 1
        for mine, theirs in ((decoder.inner.keys, plain_decoder.keys), (decoder.inner.values, plain_decoder.values)):
            ref = theirs[..., P:decoder.T, :]
            assert_within(mine[..., P:decoder.T, :], ref, forward_tolerance(tiny.dims, scale(ref), decoder.T),
                          "the cache after a rollback")


def test_an_end_token_inside_accepted_drafts_ends_the_answer_there(tiny):
    req = ask(TEXT)
    ids = tokenize_request(tiny.tokenizer, req).ids
    full, _, _ = plain(tiny, req)
    at = next(i for i in range(6, STEPS) if full.generated[i] not in full.generated[:i])  # a token new at step i
    end = {full.generated[at]}  # it ends the answer, as an end token would
    want, _, want_events = plain(tiny, req, eos=end)
    assert want.finish_reason == "eos" and len(want.generated) == at + 1
    got, decoder = speculate(tiny, req, oracle(full.generated, len(ids)), eos=end)
    assert got.generated == want.generated and got.finish_reason == "eos" and got.text == want.text
    assert got.events[-1].token_ids == want_events[-1].token_ids
    assert any(r.step < at <= r.step + r.accepted for r in decoder.rounds)  # it came as an accepted draft


def test_a_stop_string_inside_accepted_drafts_ends_the_answer_there(tiny):
    req0 = ask(TEXT)
    ids = tokenize_request(tiny.tokenizer, req0).ids
    full, _, _ = plain(tiny, req0)
    stop = tiny.tokenizer.decode(full.generated[7:9]).strip()[:4]  # text the answer holds around step 8
    assert stop
    req = ask(TEXT, stop=(stop,))
    want, _, want_events = plain(tiny, req)
    assert want.finish_reason == "stop" and len(want.generated) < STEPS
    got, _ = speculate(tiny, req, oracle(full.generated, len(ids)))
    assert (got.generated, got.text, got.finish_reason) == (want.generated, want.text, "stop")
    assert [e.delta for e in got.events] == [e.delta for e in want_events]  # the same stream, delta for delta


def test_a_token_other_than_the_draft_rolls_the_drafts_back(tiny_lm):
    """A token forced where an accepted draft was waiting (What if's force): the drafts after it are dropped
    and decoding goes on from the forced token, as plain decoding does."""
    req = ask(TEXT)
    ids = tokenize_request(tiny_lm.tokenizer, req).ids
    full, _, _ = plain(tiny_lm, req)
    force = {3: 0}
    want, _, _ = plain(tiny_lm, req, force=force)
    assert want.generated[3] == 0 and want.generated != full.generated
    got, _ = speculate(tiny_lm, req, oracle(full.generated, len(ids)), force=force)
    assert got.generated == want.generated


def test_speculative_decoding_refuses_what_it_cannot_do(tiny_lm, tokenizer):
    from kit.tiny_models import tiny_llama

    with pytest.raises(InputError, match="speculative: .*greedy"):
        fast_path.open_answer(tiny_lm, ask(TEXT, temperature=0.7), speculate=4)
    for penalty in ({"repetition_penalty": 1.3}, {"presence_penalty": 0.5}, {"logit_bias": {5: 10}}):
        with pytest.raises(InputError, match="speculative: .*penalties"):  # the check would compare raw argmaxes
            fast_path.open_answer(tiny_lm, ask(TEXT, **penalty), speculate=4)
    for k in (0, 17, 2.5, True):
        with pytest.raises(InputError, match="speculative: draft tokens per pass"):
            SpeculativeDecoder(object(), k, [1])
    biased = wrap(tiny_llama(tokenizer, attention_bias=True), tokenizer, "biased")  # decoded by HF's forward
    with pytest.raises(InputError, match="speculative: .*plain decoders"):
        fast_path.open_answer(biased, ask(TEXT), speculate=4)
