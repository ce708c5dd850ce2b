"""Speculative decoding on the real weights: greedy tokens equal Hugging Face's `generate(do_sample=False)` on
several prompts, on SmolLM2 and on Gemma 3 (past its sliding window too), and drafting pays on a request to
repeat the prompt (most drafts accepted, far fewer passes than tokens)."""
import pytest
import torch

from pipeline.faster import fast_path
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.stages.tokens import tokenize_request

pytestmark = pytest.mark.model

STEPS = 32
PASSAGE = ("The tomato is the edible berry of the plant Solanum lycopersicum, commonly known as the tomato plant. "
           "The species originated in western South America, Mexico, and Central America.")
QUESTIONS = {"repeat": "Repeat this text exactly, word for word: " + PASSAGE, "default": "Are tomatoes fruit?",
             "korean": "토마토는 과일이야?"}


def hf_greedy(lm, ids: list[int], n: int) -> list[int]:
    x = torch.tensor([ids], device=lm.device)
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n)
    return out[0, len(ids):].tolist()


def check_equals_hf(lm, question: str, steps: int = STEPS):
    request = ChatRequest.from_question(question, options=GenerationOptions(max_new_tokens=steps))
    answer, decoder = fast_path.generate_with(lm, request, speculate=8)
    want = hf_greedy(lm, tokenize_request(lm.tokenizer, request).ids, steps)
    assert answer.generated == want  # HF stops at the same end token, or both run to `steps`
    return answer, decoder


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_speculative_greedy_equals_hf_generate_on_smollm2(lm, question):
    answer, decoder = check_equals_hf(lm, QUESTIONS[question])
    if question == "repeat":  # the answer copies the prompt: most drafts are right
        accepted = sum(r.accepted for r in decoder.rounds)
        assert accepted >= len(answer.generated) // 2 and len(decoder.rounds) <= len(answer.generated) // 2


@pytest.mark.parametrize("question", ["repeat", "long"])
def test_speculative_greedy_equals_hf_generate_on_gemma(gemma_lm, question):
    """Gemma's verify pass masks each sliding layer's window per draft: a prompt past the 512-position window."""
    from kit.texts import LONG_NOTES

    check_equals_hf(gemma_lm, QUESTIONS["repeat"] if question == "repeat" else LONG_NOTES, 16)
