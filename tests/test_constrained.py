"""Grammar-constrained decoding with xgrammar on the real model: every answer fits its grammar."""
import json
import re

import pytest

from pipeline.errors import InputError
from pipeline.stages.constrained import check_spec
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.trace import run_constrained_trace

SCHEMA = json.dumps({"type": "object", "properties": {"fruit": {"type": "boolean"}, "colour": {"type": "string",
                     "enum": ["red", "green", "yellow"]}}, "required": ["fruit", "colour"]})


def _run(lm, kind, spec, question="Are tomatoes fruit? Answer in JSON.", **opts):
    opts.setdefault("max_new_tokens", 40)
    return run_constrained_trace(ChatRequest.from_question(question, options=GenerationOptions(**opts)), lm, kind, spec)


def _every_choice_was_allowed(trace):
    steps = trace.constraint["steps"]
    assert len(steps) == len(trace.steps)
    for mask, step in zip(steps, trace.steps):
        assert 1 <= mask.allowed <= trace.dims.V
        assert step.top[0].prob_after_filters >= 0  # recorded
        assert mask.best_refused_id != step.token_id


@pytest.mark.model
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_json_schema_answers_parse_and_validate(lm, temperature):
    t = _run(lm, "json_schema", SCHEMA, temperature=temperature, seed=1)
    data = json.loads(t.text)
    assert isinstance(data["fruit"], bool) and data["colour"] in ("red", "green", "yellow")
    assert t.finish_reason == "eos"
    _every_choice_was_allowed(t)
    assert t.constraint["steps"][0].allowed < 100  # '{' and a few whitespace variants, out of 49,152
    assert t.constraint["steps"][0].mass_removed > 0.5  # the model wanted to write words first


@pytest.mark.model
def test_regex_and_choice_answers_match(lm):
    t = _run(lm, "regex", r"(Yes|No), because [a-z ]{5,40}\.", question="Are tomatoes fruit?")
    assert re.fullmatch(r"(Yes|No), because [a-z ]{5,40}\.", t.text), t.text
    _every_choice_was_allowed(t)
    c = _run(lm, "choice", ["fruit", "vegetable", "both"], question="Is a tomato a fruit or a vegetable?")
    assert c.text in ("fruit", "vegetable", "both")


@pytest.mark.parametrize("kind, spec, field", [("json_schema", "{not json", "json_schema"),
                                               ("json_schema", "[1, 2]", "json_schema"),
                                               ("regex", "(unclosed", "regex"), ("choice", [], "choice"),
                                               ("grammar", "x", "kind"), ("regex", "", "regex")])
def test_bad_grammars_are_refused_with_the_field(kind, spec, field):
    with pytest.raises(InputError) as e:
        check_spec(kind, spec)
    assert e.value.field == field


@pytest.mark.parametrize("kind, spec, words", [
    ("json_schema", "[" * 9_999 + "]" * 9_999, "9,999 deep"),  # RecursionError in json.loads before
    ("json_schema", '{"a":' * 2_500 + "1" + "}" * 2_500, "2,500 deep"),
    ("regex", "(" * 3_000 + "a" + ")" * 3_000, "3,000 deep"),  # RecursionError in re.compile before
    ("regex", "a{99999999999}", "{99999999999}"),  # OverflowError in re.compile before
    ("regex", "a{2,99999999999}", "at most 1,000"),
    ("json_schema", '{"type": "objct"}', "at type"),  # jsonschema's meta-schema check
    ("json_schema", '{"type": "string", "pattern": "a{99999999999}"}', "repetition"),  # OverflowError before
    ("json_schema", '{"$schema": []}', "must be the address"),  # TypeError (unhashable) in jsonschema before
    ("json_schema", '{"$schema": 5}', "must be the address"),  # AttributeError before
])
def test_grammars_that_crashed_the_parsers_are_refused(kind, spec, words):
    with pytest.raises(InputError) as e:
        check_spec(kind, spec)
    assert e.value.field == kind and words in e.value.message


def test_nesting_is_counted_outside_strings_and_classes():
    assert check_spec("json_schema", '{"type": "string", "enum": ["' + "[" * 100 + '"]}')
    assert check_spec("regex", r"\(" * 100 + "[(]" * 100 + "a{1000}")
