"""`trace --temperatures T1,T2,...`: one temperature per sample, the samples drawn together in one batch
(pipeline.run.samples). Fast tier: every bad input exits 2 on one line naming the option, before the model loads
(run_cli's weights cache cannot be used, so an accepted value stops at the weights). Model tier: on SmolLM2, a
sample at T = 0 is the greedy answer, and the JSON records each sample's temperature."""
from __future__ import annotations

import json

import pytest
from kit.cli import run_cli

from pipeline.model import weights_cache
from pipeline.run.samples import MAX_SAMPLES

REACHED_THE_WEIGHTS = f"error: {weights_cache.CACHE_ENV}: "  # run_cli's unusable weights cache: the checks passed


@pytest.mark.parametrize("argv, said", [
    (["--temperatures", ""], "temperatures: temperature 1 is empty"),
    (["--temperatures=0,,1"], "temperatures: temperature 2 is empty"),
    (["--temperatures=0,1,"], "temperatures: temperature 3 is empty"),
    (["--temperatures=0,warm"], "temperatures: temperature 2, 'warm', is not a number."),
    (["--temperatures=1,0x1"], "temperatures: temperature 2, '0x1', is not a number."),
    (["--temperatures=nan"], "temperatures: temperature 1 must be 0 (greedy) or more, got nan."),
    (["--temperatures=1,inf"], "temperatures: temperature 2 must be 0 (greedy) or more, got inf."),
    (["--temperatures=-inf"], "temperatures: temperature 1 must be 0 (greedy) or more, got -inf."),
    (["--temperatures=1," + "9" * 5000], "temperatures: temperature 2 must be 0 (greedy) or more, got inf."),
    (["--temperatures=-0.5,1"], "temperatures: temperature 1 must be 0 (greedy) or more, got -0.5."),
    (["--temperatures=1,1e-4"], "temperatures: temperature 2 must be 0 (greedy) or at least 0.001"),
    ([f"--temperatures={','.join(['1'] * (MAX_SAMPLES + 1))}"],
     f"temperatures: gives {MAX_SAMPLES + 1} temperatures; at most {MAX_SAMPLES} samples"),
    (["--temperatures=" + ",".join(["1"] * 5000)], "temperatures: gives 5,000 temperatures; at most"),
    (["--samples", "3", "--temperatures", "0,1"], "temperatures: gives 2 temperatures but --samples is 3"),
    (["--samples", "0", "--temperatures", "1"], "samples: must be a whole number from 1 to 8"),
    (["--temperature", "1", "--temperatures", "0,1"], "argument --temperatures: not allowed with argument "
                                                      "--temperature"),
    (["--temperatures", "0,1", "--force", "0:5"], "force: is for one run; leave it out with --samples or "
                                                  "--temperatures"),
    (["--temperatures", "0,1", "--commitment"], "commitment: is for one run"),
])
def test_a_bad_temperatures_exits_2_on_one_line_naming_it(tmp_path, argv, said):
    code, out, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", *argv)
    assert (code, out) == (2, "") and err.startswith(f"error: {said}") and err.count("\n") == 1, err
    assert "Traceback" not in err and len(err) < 300


@pytest.mark.parametrize("argv", [["--temperatures", "0,1.0"], ["--samples", "2", "--temperatures", " 0, 1.5 "],
                                  ["--temperatures", "1e-3"], ["--temperatures", ",".join(["2"] * MAX_SAMPLES)]])
def test_good_temperatures_are_accepted_and_go_on_to_the_model(tmp_path, argv):
    code, _out, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", *argv)
    assert code == 2 and err.startswith(REACHED_THE_WEIGHTS), err  # the checks passed; the weights are next


@pytest.mark.parametrize("option", ["--temperatures=0,1", "--samples=2"])
def test_the_report_shows_one_run_and_refuses_samples(tmp_path, option):
    """`report` takes trace's options, but draws no samples: many temperatures are refused, not ignored."""
    code, _out, err = run_cli(tmp_path, "report", "Hi", "--html", str(tmp_path / "r.html"), option)
    name = option[2:].split("=")[0]
    assert code == 2 and err.startswith(f"error: {name}: draws many samples") and err.count("\n") == 1, err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.model
def test_real_temperatures_0_and_1_give_sample_0_the_greedy_answer(tmp_path, lm):
    common = ["--max-new-tokens", "12", "--seed", "100"]
    out, one = tmp_path / "samples.json", tmp_path / "one.json"
    code, printed, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--temperatures", "0,1.0",
                                 "--json", str(out), *common, real_weights=True)
    assert code == 0, err
    samples = json.loads(out.read_text())["samples"]
    assert [(s["seed"], s["temperature"]) for s in samples] == [(100, 0.0), (101, 1.0)]
    assert "[0] seed 100, temperature 0," in printed and "[1] seed 101, temperature 1," in printed
    code, _, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--temperature", "0", "--json", str(one),
                           *common, real_weights=True)
    assert code == 0, err
    greedy = json.loads(one.read_text())["generated_token_ids"]
    assert samples[0]["generated_token_ids"] == greedy  # T = 0 is greedy: the single run's answer, token for token
    assert samples[1]["generated_token_ids"] != greedy  # T = 1 drew another answer (seed 101 parts at once)
