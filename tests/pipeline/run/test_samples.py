"""Many answers at once (pipeline.run.samples): N samples of one request in one batch, each equal to a separate run
with its own seed and temperature; the disagreement measure (pipeline.stages.disagreement) against a hand
calculation; `trace --samples` on the command line. Tiny models in the fast tier, the real ones in the model tier."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from kit.cli import run_cli

from pipeline.core.errors import InputError
from pipeline.run.samples import MAX_SAMPLES, check_count, draw_samples
from pipeline.run.trace import run_trace
from pipeline.stages.disagreement import mean_pairwise_js
from pipeline.stages.request import ChatRequest, GenerationOptions

# ---- the measure, by hand ------------------------------------------------------------------------------------------


def test_js_divergence_by_hand():
    # P = [1, 0], Q = [1/2, 1/2]: M = [3/4, 1/4]; H(M) = -(3/4 log2 3/4 + 1/4 log2 1/4); H(P) = 0, H(Q) = 1
    h_m = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert mean_pairwise_js([[1, 0], [0.5, 0.5]]) == pytest.approx(h_m - 0.5)  # 0.311 bits
    assert mean_pairwise_js([[1, 0], [0, 1]]) == pytest.approx(1.0)  # nothing in common: 1 bit
    assert mean_pairwise_js([[0.2, 0.8]] * 3) == pytest.approx(0.0, abs=1e-12)
    # three rows: the mean of the three pairs (0.311, 1, 0.311)
    assert mean_pairwise_js([[1, 0], [0.5, 0.5], [0, 1]]) == pytest.approx((2 * (h_m - 0.5) + 1) / 3)


def test_js_divergence_refuses_one_distribution():
    with pytest.raises(ValueError):
        mean_pairwise_js([[0.5, 0.5]])


@pytest.mark.parametrize("n", [0, MAX_SAMPLES + 1, -1, True, 2.0])
def test_sample_count_out_of_range_is_refused(n):
    with pytest.raises(InputError, match="samples"):
        check_count(n)


# ---- the samples equal single runs -------------------------------------------------------------------------------

TEMPERATURES = [1.0, 0.0, 0.7, 1.5, 1.0]


def single(request: ChatRequest, lm, temperature: float, seed: int):
    return run_trace(replace(request, options=replace(request.options, temperature=temperature, seed=seed)), lm)


def parting_within_rounding(sample_ids: list[int], one, lm) -> str | None:
    """None when a sample's tokens equal its single run's `one`, or part where the batch's rounding can part them:
    a batched pass's scores may differ from a single pass's by each logit's float32 tolerance
    (kit.tolerance.logits_tolerance), which moves every boundary between two tokens' shares of the distribution
    (the inverse CDF the sampler reads, next_token.draw) by at most a factor expm1(2 max_tol / T); so the single
    run's draw there must lie that close to the boundary between the two tokens chosen (a greedy pick: a near-tie).
    Else, why not."""
    from kit.tolerance import logits_tolerance

    from pipeline.stages.next_token import final_probs

    ids, options = one.generated_token_ids, one.request.options
    k = next((j for j, (a, b) in enumerate(zip(sample_ids, ids)) if a != b), None)
    if k is None:
        return None if len(sample_ids) == len(ids) else f"{len(sample_ids)} tokens, its single run {len(ids)}"
    prompt = list(one.tokenized.ids)
    tol = float(np.max(logits_tolerance(lm, prompt + ids[:k])))  # the largest logit's, at the parting position
    logits = one.step_logits[k].astype(np.float64)  # (V,)
    a, b = ids[k], sample_ids[k]
    if options.greedy:
        gap = abs(logits[a] - logits[b])
        return None if gap <= 2 * tol else f"greedy pick {a} over {b} by {gap:.2e} > 2 x {tol:.2e} at step {k}"
    probs = final_probs(logits, options, prompt, ids[:k])  # (V,)
    cdf = np.cumsum(probs)
    drawn = np.random.default_rng(options.seed).random(k + 1)[k] * cdf[-1]  # one draw a step (generation._pick)
    margin = abs(drawn - cdf[min(a, b)])
    moved = math.expm1(2 * tol / options.temperature)
    return None if margin <= moved else f"step {k}: draw {margin:.2e} from the boundary, rounding moves it {moved:.2e}"


def check_samples_equal_single_runs(lm, request, temperatures, seed):
    s = draw_samples(request, lm, temperatures, seed)
    assert [x.seed for x in s.samples] == [seed + i for i in range(len(temperatures))]
    for i, (sample, t) in enumerate(zip(s.samples, temperatures)):
        one = single(request, lm, t, seed + i)
        why = parting_within_rounding(sample.generated_token_ids, one, lm)
        assert why is None, f"sample {i} (T {t}) parted from its own run: {why}"
        if sample.generated_token_ids != one.generated_token_ids:
            continue  # parted within the batch's rounding: what follows is another answer
        assert sample.finish_reason == one.finish_reason
        for alternatives, step in zip(sample.alternatives, one.steps):
            assert [a.id for a in alternatives] == [c.id for c in step.top[:5]]
            assert [a.prob for a in alternatives] == pytest.approx([c.prob for c in step.top[:5]], rel=1e-4)
    return s


def check_positions(s, lm, request):
    """Per position: the tokens of the samples still going, whether they differ, and the measure recomputed."""
    from pipeline.stages.next_token import final_probs

    longest = max(len(x.generated_token_ids) for x in s.samples)
    assert [p.position for p in s.positions] == list(range(longest))
    prompt = s.prompt_ids
    for p in s.positions:
        going = [i for i, x in enumerate(s.samples) if p.position < len(x.generated_token_ids)]
        assert [t for t in p.token_ids if t is not None] == [s.samples[i].generated_token_ids[p.position]
                                                             for i in going]
        assert p.disagree == (len({p.token_ids[i] for i in going}) > 1)
        assert (p.divergence is None) == (len(going) < 2)
    # the first position by hand: every sample read the same prompt, so its distribution is softmax(logits / T_i)
    first = run_trace(request, lm).step_logits[0].astype(np.float64)
    drawn = [final_probs(first, replace(request.options, temperature=x.temperature), prompt) for x in s.samples]
    assert s.positions[0].divergence == pytest.approx(mean_pairwise_js(drawn), abs=1e-6)


def test_tiny_samples_equal_single_runs_with_their_seeds(tiny_lm):
    request = ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=10))
    s = check_samples_equal_single_runs(tiny_lm, request, TEMPERATURES, 11)
    assert any(p.disagree for p in s.positions), "random weights at T = 1: the samples should part somewhere"
    check_positions(s, tiny_lm, request)


def test_tiny_gemma_samples_equal_single_runs(request):
    from kit.tiny_models import tiny_llama_or_gemma

    gemma = tiny_llama_or_gemma(request, request.getfixturevalue("tokenizer"), "gemma")
    chat = ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=6))
    check_samples_equal_single_runs(gemma, chat, [1.0, 1.0, 0.0], 3)


def test_greedy_samples_are_identical_and_say_so(tiny_lm):
    request = ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=6))
    s = draw_samples(request, tiny_lm, [0.0] * 3, 0)
    assert s.all_identical
    assert not any(p.disagree for p in s.positions)
    assert all(p.divergence == pytest.approx(0.0, abs=1e-9) for p in s.positions)


@pytest.mark.model
@pytest.mark.parametrize("which", ["lm", "gemma_lm"])
def test_real_samples_equal_single_runs(which, request):
    lm = request.getfixturevalue(which)
    chat = ChatRequest.from_question("Write one sentence about tomatoes.", options=GenerationOptions(max_new_tokens=16))
    s = check_samples_equal_single_runs(lm, chat, [1.0] * 4 + [0.0], 5)
    check_positions(s, lm, chat)


# ---- the command line ----------------------------------------------------------------------------------------------


def test_trace_samples_json_equals_single_traces(tmp_path, tiny_app_model):
    from pipeline.model.weights_cache import weights_cache_dir

    folder = str(tiny_app_model[0] / weights_cache_dir().name)
    common = ["--max-new-tokens", "6", "--temperature", "1", "--model", folder]
    out = tmp_path / "samples.json"
    code, printed, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--samples", "3", "--seed", "40",
                                 "--json", str(out), *common)
    assert code == 0, err
    j = json.loads(out.read_text())
    assert [(s["seed"], s["temperature"]) for s in j["samples"]] == [(40, 1.0), (41, 1.0), (42, 1.0)]
    assert "temperature" not in j["options"]  # each sample's own is given; the options' one may be none of them
    for s in j["samples"]:
        one = tmp_path / f"one-{s['seed']}.json"
        code, _, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--seed", str(s["seed"]), "--json", str(one),
                               *common)
        assert code == 0, err
        assert s["generated_token_ids"] == json.loads(one.read_text())["generated_token_ids"]
    assert all({"position", "disagree", "divergence", "token_ids"} <= set(p) for p in j["positions"])
    assert "Jensen" in j["divergence_measure"]
    assert "3 samples drawn together in one batch" in printed


@pytest.mark.parametrize("n", ["0", "9"])
def test_trace_samples_out_of_range_exits_2_naming_it(tmp_path, n):
    code, _, err = run_cli(tmp_path, "trace", "hi", "--samples", n)
    assert code == 2
    assert "samples: must be a whole number from 1 to 8" in err


def test_trace_samples_refuses_force(tmp_path):
    code, _, err = run_cli(tmp_path, "trace", "hi", "--samples", "2", "--force", "0:5")
    assert code == 2 and "force" in err and "--samples" in err


@pytest.mark.model
def test_real_trace_samples_8_equal_single_traces(tmp_path, lm):
    common = ["--max-new-tokens", "12", "--temperature", "1"]
    out = tmp_path / "samples.json"
    code, _, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--samples", "8", "--seed", "100",
                           "--json", str(out), *common, real_weights=True)
    assert code == 0, err
    samples = json.loads(out.read_text())["samples"]
    assert len(samples) == 8
    for s in samples:
        one = tmp_path / "one.json"
        code, _, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--seed", str(s["seed"]), "--json", str(one),
                               *common, real_weights=True)
        assert code == 0, err
        if s["generated_token_ids"] != json.loads(one.read_text())["generated_token_ids"]:  # the same single run
            chat = ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=12))
            again = single(chat, lm, 1.0, s["seed"])  # the CLI's single run, in this process: its scores kept
            assert again.generated_token_ids == json.loads(one.read_text())["generated_token_ids"]
            why = parting_within_rounding(s["generated_token_ids"], again, lm)
            assert why is None, f"seed {s['seed']}: {why}"


def test_a_parting_far_from_any_boundary_is_not_taken_for_rounding(tiny_lm):
    """The check that lets a sample part from its single run only at a draw within rounding of a boundary: a token
    changed where no rounding could change it is named."""
    chat = ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=6))
    one = single(chat, tiny_lm, 1.0, 7)
    assert parting_within_rounding(list(one.generated_token_ids), one, tiny_lm) is None
    ids = list(one.generated_token_ids)
    probs = one.step_logits[2].astype(np.float64)
    ids[2] = int(np.argmin(probs))  # the least likely token: its share is nowhere near the draw
    assert "from the boundary" in parting_within_rounding(ids, one, tiny_lm)
    greedy = single(chat, tiny_lm, 0.0, 7)
    ids = list(greedy.generated_token_ids)
    ids[1] = int(np.argmin(greedy.step_logits[1]))
    assert "greedy pick" in parting_within_rounding(ids, greedy, tiny_lm)
