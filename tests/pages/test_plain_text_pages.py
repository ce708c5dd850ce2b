"""Gemma sent as plain text (as a walk found it): Journey said the messages are written "with marker tokens around each
turn" while its chips showed `<bos>Are tomatoes fruit?`, and the map's request part still said "(chat template)"
(fast tier: the tiny Gemma 3 on Gemma's real tokenizer, saved where the app looks for Gemma's weights)."""
import pytest
from kit.apptest import page_app

GEMMA = "gemma-3-270m"


@pytest.fixture
def gemma(tiny_app, tiny_app_gemma):
    if tiny_app_gemma is None:
        pytest.skip("Gemma's tokenizer is not converted yet: ./run.sh converts it")
    return tiny_app_gemma


def journey(prompt_format: str):
    at = page_app("journey", req_model=GEMMA, req_max_new_tokens=2, req_prompt_format=prompt_format)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def map_text(at) -> str:
    return "\n".join(str(h.proto) for h in at.get("html"))


def test_journey_in_plain_text_names_no_template_and_no_markers(gemma):
    at = journey("plain")
    sections = [s.value for s in at.subheader]
    assert "2. Plain text and the tokenizer" in sections, sections
    said = "\n".join(m.value for m in at.markdown)
    assert "marker tokens around each turn" not in said and "no chat template and no turn markers" in said
    assert "no chat template" in map_text(at) and "(chat template)" not in map_text(at)


def test_journey_in_gemmas_chat_format_still_names_its_template(gemma):
    at = journey("chat")
    assert "2. The chat template and the tokenizer" in [s.value for s in at.subheader]
    assert "marker tokens around each turn" in "\n".join(m.value for m in at.markdown)
    assert "(chat template)" in map_text(at)


def test_the_map_part_says_plain_text():
    from types import SimpleNamespace

    from pipeline.model.dims import ModelDims
    from pipeline.stages.model_map import model_map

    dims = ModelDims.from_config(SimpleNamespace(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, hidden_size=32, intermediate_size=64,
        vocab_size=100, max_position_embeddings=128, rope_theta=10000.0, model_type="llama"), "m", "float32", "cpu")
    assert model_map(dims).before[0].detail == "the messages as one text (chat template)"
    assert "no chat template" in model_map(dims, plain=True).before[0].detail


@pytest.mark.parametrize("prompt_format, said, not_said", [("plain", "plain text", "marker tokens"),
                                                           ("chat", "marker tokens", "plain text")])
def test_presenters_template_stage_says_what_the_request_was_sent_as(gemma, prompt_format, said, not_said):
    at = page_app("presenter", req_model=GEMMA, req_max_new_tokens=2, req_prompt_format=prompt_format, pr_stage=2)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    text = "\n".join(m.value for m in at.markdown)
    assert said in text and not_said not in text
