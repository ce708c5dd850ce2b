"""Fixtures of the models: the real ones (model tier), their tokenizers, the tiny random ones (a pytest plugin)."""
import pytest

from kit.texts import DEFAULT_QUESTION
from kit.tiny_models import make_tiny_lm
from pipeline.model.registry import GEMMA3
from pipeline.model.weights_cache import weights_cache_dir


@pytest.fixture(scope="session")
def lm():
    """The real SmolLM2-135M-Instruct, loaded once for the whole run (tests using it are marked `model`)."""
    from pipeline.model.loader import shared_model

    return shared_model()


@pytest.fixture(scope="session")
def gemma_lm():
    """The real Gemma-3-270M (base), loaded once for the whole run (tests using it are marked `model`)."""
    from pipeline.model.loader import shared_model

    return shared_model("gemma-3-270m")


@pytest.fixture(scope="session")
def default_trace(lm):
    """The default request ("Are tomatoes fruit?", default options) followed once for the whole run."""
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest

    return run_trace(ChatRequest.from_question(DEFAULT_QUESTION), lm)


@pytest.fixture(scope="session")
def tokenizer():
    """The model's tokenizer alone: tokenizer files only, no weights read."""
    from transformers import AutoTokenizer

    from pipeline.model.weights_cache import weights_cache_dir

    return AutoTokenizer.from_pretrained(weights_cache_dir())


@pytest.fixture(scope="session")
def tiny_lm(tokenizer):
    return make_tiny_lm(tokenizer)


@pytest.fixture(scope="module")
def gemma_tokenizer():
    """Gemma's real tokenizer (262,144 ids), from the converted weights cache's files only."""
    folder = weights_cache_dir(GEMMA3)
    if not (folder / "tokenizer.json").exists():
        pytest.skip(f"Gemma's tokenizer is not converted yet ({folder}): ./run.sh converts it")
    from pipeline.model.weights_cache import load_tokenizer

    return load_tokenizer(folder, GEMMA3)


@pytest.fixture(scope="module")
def tiny_models(tokenizer):
    """{"llama": a tiny Llama, "gemma": a tiny Gemma 3} on SmolLM2's tokenizer, for attribution's exact checks."""
    import torch

    from kit.tiny_models import tiny_gemma3
    from pipeline.model.loader import LoadedModel

    llama = make_tiny_lm(tokenizer, seed=1, num_hidden_layers=3, hidden_size=32, intermediate_size=64)
    gemma = LoadedModel(model=tiny_gemma3(tokenizer).eval(), tokenizer=tokenizer, name="tiny-gemma",
                        device=torch.device("cpu"))
    return {"llama": llama, "gemma": gemma}
