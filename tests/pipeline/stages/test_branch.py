"""Branch and rewind: the answer taken another way at any step, the prompt never run again."""
import numpy as np
import pytest
import torch
from kit.cli import run_cli

from pipeline.core.errors import InputError
from pipeline.run.statistics import log_probability
from pipeline.run.trace import branch_trace, run_trace
from pipeline.stages.branch import branch_decode
from pipeline.stages.request import ChatRequest, GenerationOptions

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def run(lm):
    return run_trace(ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=16)), lm)


def test_branch_keeps_the_steps_before_and_forces_its_token(lm, run):
    step = 5
    other = run.steps[step].top[1].id  # the runner-up at that step
    b = branch_trace(run, step, other, lm)
    assert b.generated_token_ids[:step] == run.generated_token_ids[:step]
    assert [s.token_text for s in b.steps[:step]] == [s.token_text for s in run.steps[:step]]
    assert b.generated_token_ids[step] == other and b.steps[step].forced
    assert not any(s.forced for s in b.steps[:step] + b.steps[step + 1:])


def test_greedy_continuation_equals_hf_generate(lm, run):
    step = 4
    forced = run.steps[step].top[2].id
    b = branch_trace(run, step, forced, lm)
    ids = torch.tensor([run.ids + run.generated_token_ids[:step] + [forced]], device=lm.device)
    with torch.inference_mode():
        ref = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=16 - step - 1)
    expected = ref[0, ids.shape[1]:].tolist()
    eos = lm.tokenizer.eos_token_id
    if eos in expected:
        expected = expected[:expected.index(eos) + 1]
    assert b.generated_token_ids[step + 1:] == expected


def test_the_cut_cache_holds_the_prompt_and_the_answer_before_the_branch(lm, run):
    for step in (0, 7):
        _, cut = branch_decode(lm, run, step, run.steps[step].token_id, "r")
        assert cut == len(run.ids) + step


def test_the_prompt_is_not_run_again(lm, run):
    from pipeline.model.passes import PassCounter, counting_passes

    with counting_passes(PassCounter()) as mine:  # this thread's passes (a warm-up may share the model)
        b = branch_trace(run, 10, run.steps[10].top[1].id, lm)
    fed_back = len(b.steps) - 10 - 1  # decode passes after the forced token
    assert mine.n == 1 + fed_back  # one pass for the 10 answer tokens before the branch


def test_path_log_probability_prefers_the_models_own_path(lm, run):
    b = branch_trace(run, 2, run.steps[2].top[5].id, lm)
    assert log_probability(run) > log_probability(b)
    by_hand = sum(np.log(np.exp(r[s.token_id] - r.max()) / np.exp(r - r.max()).sum())
                  for r, s in zip(run.step_logits.astype(np.float64), run.steps))
    assert abs(log_probability(run) - by_hand) < 1e-6


def test_paths_of_different_lengths_are_compared_per_token_from_the_branch_point(lm, run):
    from pipeline.run.statistics import mean_log_probability, step_log_probabilities

    b = branch_trace(run, 2, run.steps[2].top[5].id, lm)
    for t in (run, b):
        lp = step_log_probabilities(t)
        assert mean_log_probability(t, 2) == pytest.approx(sum(lp[2:]) / (len(t.steps) - 2))
        assert step_log_probabilities(t)[:2] == step_log_probabilities(run)[:2]  # the same up to the branch


def test_bad_branch_points_are_refused(lm, run):
    with pytest.raises(InputError, match="step"):
        branch_trace(run, 99, 5, lm)
    with pytest.raises(InputError, match="token_id"):
        branch_trace(run, 1, run.dims.V, lm)


def test_cli_force_marks_the_step(lm, tmp_path):
    import json

    out = tmp_path / "t.json"
    (tomatoes,) = lm.tokenizer.encode(" tomatoes", add_special_tokens=False)  # one token in this vocabulary
    code, _out, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--max-new-tokens", "6", "--force",
                              f"2:{tomatoes}", "--json", str(out), real_weights=True)
    assert code == 0, err[-500:]
    steps = json.loads(out.read_text())["steps"]
    assert steps[2]["token_id"] == tomatoes and steps[2]["forced"] and not steps[1]["forced"]
    code, _out, err = run_cli(tmp_path, "trace", "x", "--force", "two:3")
    assert code == 2 and "force" in err, err
