"""Random-weight models with real tokenizers: the fast tier's stand-ins for SmolLM2 and Gemma 3.

torch is imported where a model is made, not with this module, which the conftest's plugins import: a pytest started
only for the conftest's own set-up (tests/test_hypothesis_setup.py's four runs) then starts without torch (~2 s of
CPU each)."""
from kit.texts import DEFAULT_QUESTION
from pipeline.model.dims import FULL, SLIDING


def prompt_ids(lm, question: str = DEFAULT_QUESTION) -> list[int]:
    """A question's prompt as Hugging Face's own chat template writes it (the default system prompt added)."""
    return lm.tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                            add_generation_prompt=True)["input_ids"]


def make_tiny_lm(tokenizer, seed: int = 0, **config):
    """A random-weight Llama with the real tokenizer's vocabulary, wrapped like the real model.

    Bookkeeping that depends on token ids, not on what the weights know, runs on it in milliseconds.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.model.loader import LoadedModel

    settings = dict(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128, max_position_embeddings=8192,
                    attn_implementation="sdpa")
    settings.update(config)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**settings)).eval()
    return LoadedModel(model=model, tokenizer=tokenizer, name="tiny-llama", device=torch.device("cpu"))


# SmolLM2-135M-Instruct's heads (9 heads, 3 KV heads) and vocabulary at a tiny width (head_dim 8) and depth: the pages
# draw the same heads and token ids as with the real model, from random weights, over 4 layers instead of 30 (every
# layer is a dozen module calls per pass whatever its width: 30 of them were a fifth of the fast tier's time). Seed 3:
# greedy decoding of the default question never meets a near-tie (top-2 logit gap >= 0.02; seed 1's was 4e-4, so an
# answer decoded by another path than Hugging Face's could part from it on float rounding alone).
TINY_APP_LAYOUT = dict(num_hidden_layers=4, num_attention_heads=9, num_key_value_heads=3, hidden_size=72,
                       intermediate_size=144, tie_word_embeddings=True)


def copy_tokenizer_files(source, folder) -> None:
    """The tokenizer's files of a converted weights cache, copied as they are beside a tiny model's weights: the
    app reads them as it reads the real cache's (and the test run loads them once, _load_each_tokenizer_once)."""
    import shutil

    for path in source.iterdir():
        if path.is_file() and path.name.startswith(("tokenizer", "special_tokens", "added_tokens", "chat_template")):
            shutil.copyfile(path, folder / path.name)


TEXT = "Are tomatoes fruit? Botanically, yes: a tomato is the ripened ovary of a flowering plant."


WINDOW = 4  # the tiny Gemma's sliding window: shorter than the prompt, so the band shows


def wrap(model, tokenizer, name):
    import torch

    from pipeline.model.loader import LoadedModel

    return LoadedModel(model=model.eval(), tokenizer=tokenizer, name=name, device=torch.device("cpu"))


def tiny_llama(tokenizer, **config):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = dict(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512,
                    attn_implementation="sdpa")
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**settings, **config}))


def tiny_gemma3(tokenizer):
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
        head_dim=16, query_pre_attn_scalar=16, intermediate_size=48, max_position_embeddings=512,
        sliding_window=WINDOW, layer_types=[SLIDING, SLIDING, FULL],
        rope_parameters={FULL: {"rope_type": "default", "rope_theta": 1_000_000.0},
                         SLIDING: {"rope_type": "default", "rope_theta": 10_000.0}},
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        attn_implementation="sdpa")
    model = Gemma3ForCausalLM(config)
    with torch.no_grad():  # Gemma's norms multiply by (1 + weight) and start at 0: make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0, 0.5)
    return model


def hf_forward(lm, ids: list[int]):
    """Hugging Face's own forward pass of the prompt: every layer's hidden states and attention weights."""
    import torch

    from pipeline.model.loader import attention_implementation

    with torch.inference_mode(), attention_implementation(lm.model, "eager"):
        return lm.model(torch.tensor([ids], device=lm.device), output_hidden_states=True, output_attentions=True)


def tiny_llama_or_gemma(request, tokenizer, kind: str):
    """A tiny random Llama with a tied head (as SmolLM2) for kind "llama", else the tiny Gemma 3 on Gemma's real
    tokenizer (fixture `tiny_app_gemma`; the test is skipped where that tokenizer is not converted)."""
    if kind == "llama":
        return make_tiny_lm(tokenizer, seed=3, tie_word_embeddings=True)
    import pytest

    base = request.getfixturevalue("tiny_app_gemma")
    if base is None:
        pytest.skip("Gemma's tokenizer is not converted here")
    return base
