"""The API's plain logic (pipeline/api/), fast tier: bodies parsed into chat requests or refused naming the field,
the key rules, each client's places in the queue, logprobs from logits. The real server is tests/test_api_server.py."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.hypothesis_profiles import examples

from pipeline.api import anthropic_messages, openai_chat
from pipeline.api.access import ClientSlots, check_access, is_loopback
from pipeline.api.call import ModelInfo
from pipeline.api.errors import ApiError
from pipeline.api.fields import MAX_BODY_BYTES, parse_body
from pipeline.api.logprobs import log_softmax
from pipeline.stages.request import APP_MAX_NEW_TOKENS

SMOL = ModelInfo("smollm2-135m", "SmolLM2-135M-Instruct", 49152, 8192, "fp32")
CATALOGUE = {"smollm2-135m": SMOL, "SmolLM2-135M-Instruct": SMOL, "smollm2-135m-instruct": SMOL}


def chat(**body):
    return openai_chat.parse({"model": "SmolLM2-135M-Instruct",
                              "messages": [{"role": "user", "content": "Hi"}], **body}, CATALOGUE)


def refused(parse, body) -> ApiError:
    with pytest.raises(ApiError) as e:
        parse(body, CATALOGUE)
    return e.value


def test_an_openai_body_becomes_the_request_the_pages_run():
    call = openai_chat.parse({"model": "smollm2-135m", "messages": [
        {"role": "developer", "content": "  Be brief. "},
        {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " there "}]},
        {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Why? "}],
        "max_completion_tokens": 12, "temperature": 0, "stop": "\n", "seed": 7}, CATALOGUE)
    (request,) = set(call.requests)
    assert request.messages == (("system", "Be brief."), ("user", "Hello there"), ("assistant", "Hi!"),
                                ("user", "Why? "))  # earlier turns trimmed as the sidebar trims them, not the question
    assert request.model == "SmolLM2-135M-Instruct" and request.prompt_format == "chat"
    o = request.options
    assert (o.max_new_tokens, o.temperature, o.stop, o.seed) == (12, 0.0, ("\n",), 7)
    assert not call.stream and call.schema is None


def test_sampled_draws_each_have_their_own_seed_and_greedy_ones_are_one_request():
    sampled = chat(n=3, temperature=0.8, seed=41)
    assert [r.options.seed for r in sampled.requests] == [41, 42, 43]
    greedy = chat(n=3, temperature=0)
    assert len(greedy.requests) == 3 and len(set(greedy.requests)) == 1
    unseeded = chat(temperature=1.0)  # no seed: a random one, which the run's link keeps
    assert 0 <= unseeded.requests[0].options.seed < 2**31
    assert chat().requests[0].options.temperature == 1.0  # OpenAI's default, not the pages' 0
    assert chat().requests[0].options.max_new_tokens == APP_MAX_NEW_TOKENS


def test_response_format_becomes_the_schema_xgrammar_decodes_under():
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    call = chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert json.loads(call.schema) == schema
    assert json.loads(chat(response_format={"type": "json_object"}).schema) == {"type": "object"}
    assert chat(response_format={"type": "text"}).schema is None


@pytest.mark.parametrize("body,status,param", [
    ({"temperature": 2.5}, 400, "temperature"),
    ({"max_tokens": APP_MAX_NEW_TOKENS + 1}, 400, "max_tokens"),
    ({"max_completion_tokens": 0}, 400, "max_completion_tokens"),
    ({"n": 0}, 400, "n"),
    ({"seed": -1}, 400, "seed"),
    ({"top_p": 0}, 400, "top_p"),
    ({"stop": ["a"] * 9}, 400, "stop"),
    ({"stop": [""]}, 400, "stop[0]"),
    ({"top_logprobs": 3}, 400, "top_logprobs"),
    ({"logprobs": 0}, 400, "logprobs"),
    ({"stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"tools": [{"type": "function"}]}, 400, "tools"),
    ({"frobnicate": 1}, 400, "frobnicate"),
    ({"model": "gpt-4o"}, 404, "model"),
    ({"model": 3}, 400, "model"),
    ({"response_format": {"type": "yaml"}}, 400, "response_format.type"),
    ({"logit_bias": {"99999999": 5}}, 400, "logit_bias"),
    ({"messages": []}, 400, "messages"),
    ({"messages": "Hi"}, 400, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, 400, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, 400,
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": "\ud800"}]}, 400, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x" * 64_001}]}, 400, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes"}]}, 400,
     "messages[1].content"),
    ({"messages": [{"role": "user", "content": "Hi"}, {"role": "system", "content": "late"}]}, 400,
     "messages[1].role"),
    ({"messages": [{"role": "user", "content": "  "}]}, 400, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x"}] * 201}, 400, "messages"),
])
def test_a_bad_openai_field_is_refused_by_name(body, status, param):
    e = refused(openai_chat.parse, {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "Hi"}],
                                    **body})
    assert (e.status, e.param) == (status, param)
    error = e.openai_body()["error"]
    assert error["param"] == param and param in error["message"] and error["type"]


def test_an_anthropic_body_becomes_the_request_the_pages_run():
    call = anthropic_messages.parse({
        "model": "SmolLM2-135M-Instruct", "max_tokens": 20, "cache_control": {"type": "ephemeral"},
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "temperature": 0, "top_k": 5, "stop_sequences": ["."]}, CATALOGUE)
    (request,) = call.requests
    assert request.messages == (("system", "Be brief."), ("user", "Hi"))
    assert (request.options.top_k, request.options.stop, request.options.max_new_tokens) == (5, (".",), 20)
    assert call.cache_marks == 2


@pytest.mark.parametrize("body,param", [
    ({"max_tokens": None}, "max_tokens"),
    ({"temperature": 1.5}, "temperature"),  # Anthropic's range is 0 to 1
    ({"top_k": 49153}, "top_k"),
    ({"system": [{"type": "image"}]}, "system.0.type"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x",
                                                 "cache_control": {"type": "forever"}}]}]},
     "messages.0.content.0.cache_control.type"),
    ({"thinking": {"type": "enabled"}}, "thinking"),
    ({"stop_sequences": "."}, "stop_sequences"),
])
def test_a_bad_anthropic_field_is_refused_by_name(body, param):
    e = refused(anthropic_messages.parse, {"model": "SmolLM2-135M-Instruct", "max_tokens": 10,
                                           "messages": [{"role": "user", "content": "Hi"}], **body})
    assert e.status == 400 and e.param == param
    assert e.anthropic_body()["error"]["message"].startswith(param)


def test_the_body_must_be_a_json_object_of_bounded_size():
    with pytest.raises(ApiError) as e:
        parse_body(b"x" * (MAX_BODY_BYTES + 1))
    assert e.value.status == 413
    for raw in (b"{", b"[1]", b"\xff", b"[" * 100_000, b'{"a": 1' + b"0" * 5000 + b"}"):
        with pytest.raises(ApiError) as e:
            parse_body(raw)
        assert e.value.status == 400


def test_anthropic_usage_counts_reuse_and_writes_as_anthropic_does():
    assert anthropic_messages.usage(100, 5, 64, cache_marks=1) == {
        "input_tokens": 0, "output_tokens": 5, "cache_read_input_tokens": 64, "cache_creation_input_tokens": 36}
    assert anthropic_messages.usage(100, 5, 64, cache_marks=0)["input_tokens"] == 36


def test_loopback_needs_no_key_and_any_other_address_needs_one():
    assert is_loopback("localhost") and is_loopback("127.0.0.1") and is_loopback("::1")
    assert not any(is_loopback(a) for a in ("", None, "0.0.0.0", "::", "192.168.1.4", "example.org"))
    assert check_access("localhost", {}, key="") == ""
    for address in ("0.0.0.0", "192.168.1.4", None):
        with pytest.raises(ApiError) as e:
            check_access(address, {"authorization": "Bearer x"}, key="")
        assert e.value.status == 404 and "off" in e.value.message
    for headers in ({}, {"authorization": "Bearer wrong"}, {"x-api-key": "wrong"}, {"authorization": "Basic s3cret"}):
        with pytest.raises(ApiError) as e:
            check_access("0.0.0.0", headers, key="s3cret")
        assert e.value.status == 401
    assert check_access("0.0.0.0", {"authorization": "Bearer s3cret"}, key="s3cret") == "s3cret"
    assert check_access("localhost", {"x-api-key": "s3cret"}, key="s3cret") == "s3cret"  # a key set: always asked


def test_a_client_past_its_places_in_the_queue_is_told_when_to_retry():
    slots = ClientSlots(3)
    slots.take("a", 2)
    slots.take("b", 3)  # another client has its own places
    with pytest.raises(ApiError) as e:
        slots.take("a", 2, retry_after_s=0)
    assert e.value.status == 429 and e.value.headers() == {"retry-after": "1"}
    slots.give_back("a", 2)
    slots.take("a", 3)
    assert slots.held("a") == 3


def test_log_softmax_is_a_distribution_and_keeps_the_order():
    logits = np.array([[2.0, 1.0, -1e4, 0.5], [1e4, 1e4, 0.0, 0.0]], dtype=np.float32)
    lp = log_softmax(logits)
    assert np.allclose(np.exp(lp).sum(axis=1), 1)
    assert lp[0].argmax() == 0 and np.isclose(lp[1, 0], np.log(0.5))


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", 3]),
                                 "content": JSON | st.text(min_size=1)})
FIELDS = {"model": st.sampled_from(["SmolLM2-135M-Instruct", "smollm2-135m", "gpt-4o"]) | JSON,
          "messages": st.lists(MESSAGE, max_size=4) | JSON, "max_tokens": JSON, "max_completion_tokens": JSON,
          "temperature": JSON, "top_p": JSON, "top_k": JSON, "seed": JSON, "stop": JSON, "stop_sequences": JSON,
          "n": JSON, "logprobs": JSON, "top_logprobs": JSON, "response_format": JSON, "stream": JSON,
          "stream_options": JSON, "system": JSON, "logit_bias": JSON, "cache_control": JSON, "tools": JSON}


@given(body=st.dictionaries(st.sampled_from(sorted(FIELDS)), st.none(), max_size=8).flatmap(
    lambda keys: st.fixed_dictionaries({k: FIELDS[k] for k in keys})))
@settings(max_examples=examples(200))
def test_any_body_is_a_call_or_an_error_naming_a_field_never_a_crash(body):
    """What never reaches a client as a 500: any JSON body parses into a call or an ApiError with a 4xx status."""
    for parse in (openai_chat.parse, anthropic_messages.parse):
        try:
            parse(body, CATALOGUE)
        except ApiError as e:
            assert 400 <= e.status < 500 and str(e)
