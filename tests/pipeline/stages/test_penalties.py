"""Repetition, presence and frequency penalties and logit bias (pipeline.stages.penalties): against transformers'
RepetitionPenaltyLogitsProcessor and OpenAI's documented formula, and whole answers against HF's generate."""
import numpy as np
import pytest
import torch

from pipeline.core.errors import InputError
from pipeline.stages.logit_bias import check_vocabulary, logit_bias_text, parse_logit_bias
from pipeline.stages.next_token import filter_stages
from pipeline.stages.penalties import penalized
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.stages.vendor_bodies import anthropic_style, openai_style, repetition_body


@pytest.mark.parametrize("penalty", [0.5, 1.2, 2.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_repetition_penalty_equals_transformers_processor(penalty, seed):
    from transformers import RepetitionPenaltyLogitsProcessor

    rng = np.random.default_rng(seed)
    V = 300
    logits = rng.normal(0, 3, V)  # positive and negative scores
    prompt = rng.integers(0, V, 40).tolist()
    answer = rng.integers(0, V, 15).tolist() + prompt[:3]  # repeats within and across the two
    ours = penalized(logits, GenerationOptions(repetition_penalty=penalty), prompt, answer)
    hf = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([prompt + answer]),
                                                   torch.tensor(logits[None], dtype=torch.float64))
    np.testing.assert_allclose(ours, hf[0].numpy(), rtol=1e-12)
    assert (ours != logits).sum() == len(set(prompt + answer) & set(np.flatnonzero(logits).tolist()))


def test_repetition_penalty_by_hand():
    # logits [2, -1, 3], token 0 in the prompt, token 1 in the answer, p = 2: 2 / 2 = 1; -1 * 2 = -2; 3 unseen
    out = penalized(np.array([2.0, -1.0, 3.0]), GenerationOptions(repetition_penalty=2.0), [0], [1, 1])
    assert out.tolist() == [1.0, -2.0, 3.0]


def test_presence_and_frequency_penalties_by_hand():
    """OpenAI: mu[j] -> mu[j] - c[j] * frequency - (c[j] > 0) * presence, c over the answer only.

    logits [1, 2, -1, 0.5], prompt [0, 0, 3] (not counted), answer so far [1, 1, 2], frequency 0.5, presence 0.25:
      token 0: c = 0 -> 1 (the prompt does not count)
      token 1: c = 2 -> 2 - 2 * 0.5 - 0.25 = 0.75
      token 2: c = 1 -> -1 - 1 * 0.5 - 0.25 = -1.75
      token 3: c = 0 -> 0.5
    """
    options = GenerationOptions(frequency_penalty=0.5, presence_penalty=0.25)
    out = penalized(np.array([1.0, 2.0, -1.0, 0.5]), options, [0, 0, 3], [1, 1, 2])
    assert out.tolist() == [1.0, 0.75, -1.75, 0.5]
    # negative values reward repeats: frequency -1 on token 1 used twice: 2 + 2 = 4
    assert penalized(np.array([1.0, 2.0]), GenerationOptions(frequency_penalty=-1.0), [], [1, 1]).tolist() == [1, 4]


def test_logit_bias_is_added_to_the_scores_and_minus_100_all_but_bans():
    logits = np.array([3.0, 2.2, 1.6, 1.1, -1.5])  # the seed article's: [54, 24, 13, 8, 0.6] %
    options = GenerationOptions(logit_bias={"0": -100, 4: 5.5})  # OpenAI's JSON keys are strings
    assert penalized(logits, options).tolist() == [-97.0, 2.2, 1.6, 1.1, 4.0]
    stages = {s.name: s for s in filter_stages(logits, replace_t(options, 1.0))}
    assert stages["softmax"].probs[0] > 0.5 and stages["penalties"].probs[0] < 1e-40
    assert int(np.argmax(stages["penalties"].probs)) == 4  # -1.5 + 5.5 = 4.0 is now the best score


def replace_t(options, t):
    from dataclasses import replace

    return replace(options, temperature=t)


def test_the_order_is_penalties_then_temperature_then_filters():
    # raw [2, 1.9, 0]: token 0 was said, p = 2 -> [1, 1.9, 0]; at T = 0 (greedy) token 1 wins; top-k 1 keeps token 1
    logits = np.array([2.0, 1.9, 0.0])
    stages = filter_stages(logits, GenerationOptions(temperature=0.0, top_k=1, repetition_penalty=2.0), [], [0])
    names = [s.name for s in stages]
    assert names == ["softmax", "penalties", "temperature", "top_k", "top_p", "min_p"]
    assert stages[-1].probs.tolist() == [0.0, 1.0, 0.0]
    np.testing.assert_allclose(stages[1].probs, np.exp([1, 1.9, 0]) / np.exp([1, 1.9, 0]).sum())


@pytest.mark.parametrize("field, value", [
    ("repetition_penalty", 0.0), ("repetition_penalty", -1.0), ("repetition_penalty", float("nan")),
    ("repetition_penalty", 11.0), ("presence_penalty", 2.5), ("frequency_penalty", -3.0),
    ("frequency_penalty", float("inf")), ("presence_penalty", True),
    ("logit_bias", {1: 101}), ("logit_bias", {-1: 0}), ("logit_bias", {"x": 1}), ("logit_bias", {1: float("nan")}),
    ("logit_bias", "13:5"), ("logit_bias", [(1, 2), (1, 3)]), ("logit_bias", {i: 1 for i in range(301)}),
])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(InputError) as e:
        GenerationOptions(**{field: value})
    assert e.value.field == field


def test_logit_bias_ids_are_checked_against_the_vocabulary():
    options = GenerationOptions(logit_bias={49_151: 1.0})
    check_vocabulary(options, 49_152)
    with pytest.raises(InputError, match="past the vocabulary") as e:
        check_vocabulary(GenerationOptions(logit_bias={49_152: 1.0}), 49_152)
    assert e.value.field == "logit_bias"


def test_logit_bias_text_round_trips():
    bias = parse_logit_bias(" 42:2.5,13:-100  7:0 ")
    assert bias == ((7, 0.0), (13, -100.0), (42, 2.5))
    assert logit_bias_text(bias) == "7:0, 13:-100, 42:2.5" and parse_logit_bias(logit_bias_text(bias)) == bias
    assert parse_logit_bias("") == ()
    for bad in ("13", "x:1", "1:y", "-1:2", "1:200", "1:1 1:2", "١:1"):
        with pytest.raises(InputError) as e:
            parse_logit_bias(bad)
        assert e.value.field == "logit_bias"


def test_vendor_bodies_carry_what_each_api_has():
    options = GenerationOptions(presence_penalty=0.5, frequency_penalty=-0.25, logit_bias={13: -100},
                                repetition_penalty=1.3)
    request = ChatRequest.from_question("hi", options=options)
    body = openai_style(request)
    assert (body["presence_penalty"], body["frequency_penalty"], body["logit_bias"]) == (0.5, -0.25, {"13": -100.0})
    assert "repetition_penalty" not in body  # not an OpenAI parameter
    assert not {"presence_penalty", "frequency_penalty", "logit_bias", "repetition_penalty"} & set(
        anthropic_style(request))
    assert repetition_body(request.options) == {"repetition_penalty": 1.3}
    plain = ChatRequest.from_question("hi")
    assert not {"presence_penalty", "frequency_penalty", "logit_bias"} & set(openai_style(plain))
    assert repetition_body(plain.options) == {}


def test_requests_differing_only_in_a_penalty_are_different_runs():
    from views.request.session import request_key

    base = ChatRequest.from_question("hi")
    keys = {request_key(ChatRequest.from_question("hi", options=GenerationOptions(**{k: v})))
            for k, v in (("repetition_penalty", 1.2), ("presence_penalty", 0.5), ("frequency_penalty", 0.5),
                         ("logit_bias", {5: 1.0}), ("logit_bias", {5: 2.0}))}
    assert len(keys) == 5 and request_key(base) not in keys


# ---- whole answers: ours == HF generate(do_sample=False, repetition_penalty=p) ---------------------------
def hf_greedy(lm, ids: list[int], n: int, **kwargs) -> list[int]:
    from pipeline.stages.generation import end_token_ids

    x = torch.tensor([ids], device=lm.device)
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                                **kwargs)[0, len(ids):].tolist()
    ends = end_token_ids(lm)
    cut = next((i for i, t in enumerate(out) if t in ends), None)
    return out if cut is None else out[:cut + 1]


def check_equals_hf(lm, question: str, penalty: float, n: int, batched: bool = True) -> None:
    """The captured path, the plain one and (batched) decode_batch beside another request all give HF's answer."""
    from pipeline.faster import fast_path
    from pipeline.run.trace import run_trace, run_traces
    from pipeline.stages.tokens import tokenize_request

    options = GenerationOptions(max_new_tokens=n, repetition_penalty=penalty)
    request = ChatRequest.from_question(question, options=options)
    expected = hf_greedy(lm, tokenize_request(lm.tokenizer, request).ids, n, repetition_penalty=penalty)
    unpenalized = fast_path.generate(lm, ChatRequest.from_question(question, options=GenerationOptions(
        max_new_tokens=n))).generated
    assert expected != unpenalized  # the penalty changes this answer, so the comparison can tell
    assert run_trace(request, lm).generated_token_ids == expected
    assert fast_path.generate(lm, request).generated == expected
    if batched:  # each row of the batch counts its own prompt and answer
        other = ChatRequest.from_question("Name three colours.", options=options)
        both = run_traces([request, other], lm)
        assert [t.generated_token_ids for t in both] == [expected, fast_path.generate(lm, other).generated]


def test_generate_with_repetition_penalty_equals_hf_on_a_tiny_model(tiny_lm):
    # a random-weight model seldom repeats itself, so p = 0.5 (which rewards repeats) is what changes its answer
    check_equals_hf(tiny_lm, "Are tomatoes fruit?", 0.5, 10)


def test_generate_with_repetition_penalty_equals_hf_on_a_tiny_gemma(tiny_app_gemma):
    if tiny_app_gemma is None:
        pytest.skip("Gemma's tokenizer is not converted on this machine")
    check_equals_hf(tiny_app_gemma, "Are tomatoes fruit?", 0.5, 6, batched=False)


@pytest.mark.model
def test_generate_with_repetition_penalty_equals_hf_on_smollm2(lm):
    check_equals_hf(lm, "List the days of the week.", 1.3, 10, batched=False)  # ~20 s on an idle 2-core machine


# ---- the command line -----------------------------------------------------------------------------------
def test_the_command_line_takes_the_penalties_and_the_bias():
    from pipeline.cli import build_parser
    from pipeline.cli.commands.trace import options_from_args

    args = build_parser().parse_args(["trace", "hi", "--repetition-penalty", "1.2", "--presence-penalty", "0.5",
                                      "--frequency-penalty", "-0.5", "--logit-bias", "13:-100",
                                      "--logit-bias", "7:2.5"])
    o = options_from_args(args)
    assert (o.repetition_penalty, o.presence_penalty, o.frequency_penalty) == (1.2, 0.5, -0.5)
    assert o.logit_bias == ((7, 2.5), (13, -100.0))
    assert options_from_args(build_parser().parse_args(["trace", "hi"])) == GenerationOptions()


@pytest.mark.parametrize("flags, field", [(["--repetition-penalty", "0"], "repetition_penalty"),
                                          (["--presence-penalty", "3"], "presence_penalty"),
                                          (["--logit-bias", "13"], "logit_bias"),
                                          (["--logit-bias", "13:500"], "logit_bias")])
def test_the_command_line_refuses_bad_values_before_loading_the_model(flags, field, tmp_path):
    from kit.cli import run_cli

    code, _out, err = run_cli(tmp_path, "trace", "hi", *flags)  # a weights cache that cannot be used (cli_kit)
    assert code == 2
    assert f"{field}:" in err


def test_trace_force_past_the_vocabulary_is_refused_by_the_same_check(tmp_path, tiny_app_model):
    """`trace --force STEP:ID` and a logit bias name token ids: one check (pipeline.core.checks.in_vocabulary),
    one message, each naming its own field."""
    from kit.cli import run_cli

    from pipeline.model.weights_cache import weights_cache_dir

    root, lm = tiny_app_model
    V = lm.dims.V
    with pytest.raises(InputError) as bias:
        check_vocabulary(GenerationOptions(logit_bias={V: 1.0}), V)
    code, _out, err = run_cli(tmp_path, "trace", "Hi", "--max-new-tokens", "2", "--force", f"1:{V}",
                              "--model", str(root / weights_cache_dir().name))
    assert code == 2 and bias.value.message in err and "force" in err, err[-500:]
