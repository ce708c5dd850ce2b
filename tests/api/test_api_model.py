"""The API on the real SmolLM2 (server.py, started as ./run.sh starts it, on the real weights): the openai and anthropic
SDKs' greedy answers are Hugging Face's `generate` for the same messages, and the logprobs are the log-softmax of the
model's own logits for those tokens."""
import numpy as np
import pytest
import torch
from kit.browser import app_server
from kit.sdks import openai
from kit.tolerance import assert_within, logits_tolerance

from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.stages.tokens import tokenize_request

pytestmark = [pytest.mark.model, pytest.mark.browser]

SMOL = "SmolLM2-135M-Instruct"
SYSTEM, QUESTION = "You are a concise botanist.", "Is a tomato a fruit or a vegetable?"
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
NEW = 24


@pytest.fixture(scope="module")
def server(real_server_cache):
    """A server on the real weights (linked, read-only) with stores of its own."""
    with app_server("api-model-server.log", cache_dir=real_server_cache, script="server.py",
                    env={"TPE_API_KEY": ""}) as url:
        yield url


def hf_answer(lm) -> tuple[list[int], list[int]]:
    """(prompt ids, HF generate's greedy new ids) for MESSAGES."""
    request = ChatRequest.from_question(QUESTION, system=SYSTEM, options=GenerationOptions(max_new_tokens=NEW))
    ids = tokenize_request(lm.tokenizer, request).ids
    t = torch.tensor([ids], device=lm.device)
    with torch.inference_mode():
        out = lm.model.generate(t, attention_mask=torch.ones_like(t), do_sample=False, max_new_tokens=NEW)
    return ids, out[0, len(ids):].tolist()


def answer_text(lm, new_ids: list[int]) -> str:
    eos = lm.tokenizer.eos_token_id
    return lm.tokenizer.decode([i for i in new_ids if i != eos], skip_special_tokens=True)


def test_greedy_answers_are_hf_generate(lm, server):
    import anthropic

    ids, new = hf_answer(lm)
    expected = answer_text(lm, new)
    oa = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)
    whole = oa.chat.completions.create(model=SMOL, messages=MESSAGES, max_tokens=NEW, temperature=0)
    assert whole.choices[0].message.content == expected
    assert whole.usage.prompt_tokens == len(ids)
    streamed = oa.chat.completions.create(model=SMOL, messages=MESSAGES, max_tokens=NEW, temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == expected
    an = anthropic.Anthropic(base_url=server, api_key="unused", max_retries=0, timeout=300)
    message = an.messages.create(model=SMOL, max_tokens=NEW, system=SYSTEM, extra_body={"temperature": 0},
                                 messages=[{"role": "user", "content": QUESTION}])
    # the same prompt a third time (the prefix cache is on): every full 16-token block but the last token's is read
    assert message.content[0].text == expected
    assert message.usage.cache_read_input_tokens == (len(ids) - 1) // 16 * 16 > 0


def test_logprobs_are_the_log_softmax_of_the_models_logits(lm, server):
    ids, new = hf_answer(lm)
    oa = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)
    done = oa.chat.completions.create(model=SMOL, messages=MESSAGES, max_tokens=NEW, temperature=0, logprobs=True,
                                      top_logprobs=5)
    content = done.choices[0].logprobs.content
    answer_ids = [i for i in new if i != lm.tokenizer.eos_token_id]
    assert len(content) == len(answer_ids)
    assert b"".join(bytes(e.bytes) for e in content).decode("utf-8") == done.choices[0].message.content
    with torch.inference_mode():
        logits = lm.model(torch.tensor([ids + new], device=lm.device)).logits[0].float().cpu()
    expected = torch.log_softmax(logits[len(ids) - 1:len(ids) - 1 + len(answer_ids)], dim=-1).numpy()
    for step, (entry, token) in enumerate(zip(content, answer_ids)):
        # the server's pass (over cached K/V, in a batch) and this one round differently: a log-softmax moves by at
        # most its logit's error plus the largest logit error (the log-sum-exp's), so twice the largest tolerance
        tol = 2 * float(logits_tolerance(lm, ids + new, position=len(ids) - 1 + step).max())
        assert_within(entry.logprob, float(expected[step, token]), tol, f"step {step}'s logprob")
        best = np.argsort(-expected[step])[:5]
        assert_within(np.array([t.logprob for t in entry.top_logprobs]), expected[step, best], tol,
                      f"step {step}'s top logprobs")
