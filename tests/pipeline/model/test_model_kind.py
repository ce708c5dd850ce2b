"""Each model as it is: the registry says its kind (instruct, base, unknown), every sentence about how it was trained
comes from that kind, a base model picked in the sidebar starts on plain text, and where the answer is shown the
pages say what chat turns do to a base model.

Fast tier: pages on conftest's tiny models (a tiny Gemma 3 with Gemma's real tokenizer, beside the tiny SmolLM2).
"""
import os

import pytest
from kit.apptest import page_app
from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

from pipeline.model.model_kind import chat_turns_note, template_sentence
from pipeline.model.registry import GEMMA3, SMOLLM2, local_folder

GEMMA = GEMMA3.key


@pytest.fixture
def gemma_app(tiny_app_model, tiny_app_gemma, tiny_app):
    if tiny_app_gemma is None:
        pytest.skip("Gemma's tokenizer is not converted yet: ./run.sh converts it")
    return tiny_app_gemma


def test_the_registry_says_each_models_kind():
    assert (SMOLLM2.kind, GEMMA3.kind, local_folder("/tmp/x").kind) == ("instruct", "base", "unknown")
    assert (SMOLLM2.starting_format, GEMMA3.starting_format, local_folder("/tmp/x").starting_format) == (
        "chat", "plain", "chat")


def test_training_sentences_follow_the_kind():
    assert "tuned on conversations written in its chat template" in template_sentence(SMOLLM2)
    base = template_sentence(GEMMA3)
    assert "base model" in base and "never tuned on conversations" in base
    assert "trained on conversations" not in base.replace("never tuned on conversations", "")
    assert chat_turns_note(GEMMA3, "chat") and "base model" in chat_turns_note(GEMMA3, "chat")
    assert chat_turns_note(GEMMA3, "plain") is None and chat_turns_note(SMOLLM2, "chat") is None


def texts(at) -> str:
    return "\n".join(str(e.value) for kind in ("markdown", "caption", "info", "warning") for e in getattr(at, kind))


def test_request_and_template_never_says_a_base_model_was_trained_on_conversations(gemma_app):
    at = page_app("request", req_model=GEMMA, req_prompt_format="chat", req_max_new_tokens=3)
    at.run()
    assert not at.exception, at.exception
    shown = texts(at)
    assert "trained on conversations" not in shown and "base model" in shown
    at = page_app("request", req_max_new_tokens=3)  # SmolLM2, instruct
    at.run()
    assert "tuned on conversations" in texts(at)


@pytest.mark.parametrize("page", ["generation", "next_token", "journey"])
def test_where_the_answer_is_shown_chat_turns_to_a_base_model_are_explained(gemma_app, page):
    notes = {}
    for model, fmt in ((GEMMA, "chat"), (GEMMA, "plain"), (SMOLLM2.key, "chat")):
        at = page_app(page, req_model=model, req_prompt_format=fmt, req_max_new_tokens=3)
        at.run()
        assert not at.exception, at.exception
        notes[model, fmt] = [i.value for i in at.info if "Sent chat turns" in i.value]
    assert len(notes[GEMMA, "chat"]) == 1 and "base model" in notes[GEMMA, "chat"][0]
    assert notes[GEMMA, "plain"] == [] and notes[SMOLLM2.key, "chat"] == []


def test_a_base_model_picked_in_the_sidebar_starts_on_plain_text(gemma_app):
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = {"max_new_tokens": "3"}
    at.run()
    at.selectbox(key="req_model").set_value(GEMMA).run()
    assert not at.exception, at.exception
    assert at.radio(key="req_prompt_format").value == "plain"
    assert at.query_params["format"] == "plain"  # in the link: it reopens on plain text
    at.selectbox(key="req_model").set_value(SMOLLM2.key).run()
    assert at.session_state["req_prompt_format"] == "chat" and "format" not in at.query_params
