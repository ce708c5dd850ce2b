"""What a user types on the command line, at its most hostile: every option of every command (`python -m pipeline
...` and `tpe report`), found in the parsers themselves so that a new option is covered the day it is added,
given 5,000-digit numbers (also negative, also as 1e5000), nan, inf, lone surrogates, control characters, a NUL and
5,000-character text. Each run exits 0 or 2, never with a traceback; exit 2 prints one short line naming the option.

Fast tier: in-process (tests/cli_kit.py), with a weights cache that cannot be used, so a value the checks accept gets
as far as the weights and stops there, naming TPE_CACHE_DIR. The `model` tier runs what was accepted on the real
model. Then the issue's reproducers one by one: file names over 255 bytes, a result that is not a finite number,
roles no provider accepts in a cache-audit log, and the messages that named another field than the one typed."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kit.cli import run_cli
from kit.paths import ROOT

from pipeline.cli.arguments import write_json
from pipeline.cli.parser import MAX_LINE, error_line
from pipeline.core.errors import InputError
from pipeline.model import weights_cache
from pipeline.prompt_cache import audit as ca

EXAMPLE_LOG = str(ca.EXAMPLES_DIR / "support_chatbot_trap.jsonl")
DIGITS = "9" * 5000  # past int()'s 4,300-digit limit: ValueError, which the CLI took for a bug (exit 1, traceback)
HOSTILE = {  # name -> value; the short ones first (the model tier runs those)
    "escape": "\x1b[2J", "surrogate byte": "\udcff", "lone surrogate": "\ud800", "nul": "\x00", "newline": "a\nb",
    "empty": "", "1e-320": "1e-320", "-1": "-1", "0": "0", "nan": "nan", "inf": "inf", "-inf": "-inf",
    "1e5000": "1e5000", "-1e5000": "-1e5000",
    "digits": DIGITS, "negative digits": "-" + DIGITS, "4,000 digits": "9" * 4000, "long text": "x" * 5000,
}
SHORT = [name for name, value in HOSTILE.items() if len(value) < 100]
VALID = {"question": "Hi", "text": "Hi there", "file": EXAMPLE_LOG}  # a good value for each positional argument
VALID_FOR = {"lesson": {"action": "check", "file": str(Path(ROOT) / "lessons" / "first-hour.toml")}}  # per command
REACHED_THE_WEIGHTS = f"error: {weights_cache.CACHE_ENV}: "  # run_cli's unusable weights cache: the checks passed


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by the name typed: `tpe`'s, which holds `python -m pipeline`'s and the report."""
    from ui.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def label(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


OPTIONS = [(name, label(a)) for name, parser in commands().items() for a in options(parser)]


def is_path(action: argparse.Action) -> bool:
    """An option naming a file (--json, --html, cache-audit's FILE): its values go under the test's folder."""
    return action.dest == "file" or action.dest.endswith("_file")


def argv_for(command: str, values: dict[argparse.Action, str | None], tmp_path: Path,
             base: tuple[str, ...] = ()) -> list[str]:
    """The command line with these values (None: a flag, given alone), every other argument valid."""
    parser = commands()[command]
    valid = {**VALID, **VALID_FOR.get(command, {})}
    positionals = {a.dest: valid[a.dest] for a in options(parser) if not a.option_strings}
    given = [f"{a.option_strings[0]}={tmp_path / a.dest}" for a in options(parser) if a.required and a.option_strings]
    for action, value in values.items():
        if value and is_path(action):
            value = str(tmp_path / value)
        if not action.option_strings:
            positionals[action.dest] = value
        elif value is None:
            given.append(action.option_strings[0])
        else:
            given.append(f"{action.option_strings[0]}={value}")  # '--top-k=-1': argparse would read -1 as an option
    return [command, *base, *given, *(["--", *positionals.values()] if positionals else [])]


def typed_names(action: argparse.Action) -> set[str]:
    """What a message may call it: '--max-new-tokens' -> max-new-tokens, max_new_tokens; QUESTION -> question."""
    names = {s.lstrip("-") for s in action.option_strings} | {action.dest}
    return names | {n.replace("-", "_") for n in names}


def refusal_problems(action: argparse.Action, code: int, err: str) -> str | None:
    """Why this run's exit is not one the issue accepts (None: it is): exit 0, or exit 2 on one short line that
    names the option (its own check's `error: max_new_tokens: ...` or argparse's `error: argument --steps: ...`),
    or that the checks passed and the run got as far as the weights."""
    if "Traceback" in err or code not in (0, 2):
        return f"exit {code}: {err[-300:]}"
    if code == 0:
        return None
    if not err.endswith("\n") or err.count("\n") != 1 or len(err) > len("error: \n") + MAX_LINE:
        return f"not one short line ({len(err):,} characters, {err.count(chr(10))} lines): {err[:200]!r}"
    named = tuple(f"error: {n}: " for n in typed_names(action)) + \
        tuple(f"error: argument {s}: " for s in action.option_strings or [action.dest]) + (REACHED_THE_WEIGHTS,)
    return None if err.startswith(named) else f"names another field: {err!r}"


def fuzz_cases(command: str, option: str):
    action = next(a for a in options(commands()[command]) if label(a) == option)
    return action, ([None] if action.nargs == 0 else list(HOSTILE))


@pytest.mark.parametrize("command, option", OPTIONS, ids=[f"{c} {o}" for c, o in OPTIONS])
def test_every_option_refuses_hostile_values_on_one_line_naming_it(tmp_path, command, option):
    """A flag is given alone; a valued option gets every HOSTILE value in turn (the others valid)."""
    action, names = fuzz_cases(command, option)
    problems = {}
    for name in names:
        value = None if name is None else HOSTILE[name]
        code, _out, err = run_cli(tmp_path, *argv_for(command, {action: value}, tmp_path))
        if why := refusal_problems(action, code, err):
            problems[name] = why
    assert not problems, problems


def test_options_are_found_in_the_parsers():
    """The fuzz covers what the parsers hold: every command, and those report takes from trace (add_arguments)."""
    found = set(OPTIONS)
    assert {c for c, _ in found} == {"trace", "tokens", "cache-demo", "cache-audit", "serving", "score", "explain",
                                     "speculate", "report", "temperature-zero", "lesson"}
    assert {("trace", "--logit-bias"), ("trace", "--force"), ("serving", "--batch-sizes"), ("report", "--html"),
            ("report", "--force"), ("cache-audit", "--prefill-tps"), ("cache-audit", "file")} <= found


# The model tier: each command once on the real model, every valued option given the first short HOSTILE value its
# checks accepted (found as in the fast tier). Cheap settings first (one new token, batch size 1), so that the run
# is seconds; the 5,000-character values are left out (a 5,000-digit question is 5,000 tokens: minutes of CPU).
CHEAP = {"trace": ("--max-new-tokens=1",), "report": ("--max-new-tokens=1",),
         "speculate": ("--max-new-tokens=2", "--repeats=1"), "cache-demo": ("--scenario=conversation", "--no-cold"),
         "serving": ("--batch-sizes=1", "--steps=2", "--repeats=1"),
         "temperature-zero": ("--requests=2", "--new-tokens=2", "--max-batch=2")}  # its default: 1,000 x 24 tokens


def accepted_values(command: str, tmp_path: Path) -> dict[argparse.Action, str]:
    """{option: the first short HOSTILE value its checks let through to the weights}."""
    out = {}
    for action in options(commands()[command]):
        if action.nargs == 0:
            continue
        for name in SHORT:
            code, _out, err = run_cli(tmp_path, *argv_for(command, {action: HOSTILE[name]}, tmp_path))
            if code == 2 and err.startswith(REACHED_THE_WEIGHTS):
                out[action] = HOSTILE[name]
                break
    return out


@pytest.mark.model
@pytest.mark.parametrize("command", sorted(commands()))
def test_hostile_values_the_checks_accept_run_on_the_real_model(tmp_path, command):
    accepted = accepted_values(command, tmp_path)
    if not accepted:
        pytest.skip(f"{command}: no short hostile value got as far as the model (refused, or no model needed)")
    argv = argv_for(command, accepted, tmp_path, base=CHEAP.get(command, ()))
    code, _out, err = run_cli(tmp_path, *argv, real_weights=True)
    problems = [refusal_problems(a, code, err) for a in accepted] if code else [None]
    assert None in problems, (argv, code, err)  # exit 0, or exit 2 naming one of the options given


# ---- the reproducers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, field", [
    (["trace", "--logit-bias", DIGITS + ":1", "Hi"], "logit_bias"),
    (["trace", "--logit-bias", "1:" + DIGITS, "Hi"], "logit_bias"),  # float() reads it: inf, out of range
    (["trace", "--force", DIGITS + ":1", "Hi"], "force"),
    (["trace", "--force", "1:" + DIGITS, "Hi"], "force"),
    (["trace", "--force", "0" * 5000 + "1:1", "Hi"], None),  # leading zeros: step 1, accepted
    (["serving", "--batch-sizes", "1," + DIGITS], "batch_sizes"),
    (["trace", "--max-new-tokens", DIGITS, "Hi"], "argument --max-new-tokens"),  # argparse's refusal, on one line
])
def test_5000_digit_values_exit_2_on_one_line(tmp_path, argv, field):
    code, out, err = run_cli(tmp_path, *argv)
    if field is None:
        assert err.startswith(REACHED_THE_WEIGHTS), err
        return
    assert (code, out) == (2, "") and err.startswith(f"error: {field}: ") and err.count("\n") == 1, err
    assert len(err) < 200 and "Traceback" not in err


def test_5000_digit_logit_bias_in_a_process_exits_2_on_one_line(tmp_path):
    """As typed in a shell: the real `python -m pipeline`, its argv decoded by Python (a byte that is not UTF-8
    arrives as a lone surrogate: $'\\xff' -> '\\udcff')."""
    unusable = tmp_path / "not-a-folder"
    unusable.write_text("")
    env = {**os.environ, weights_cache.CACHE_ENV: str(unusable / "cache")}
    for argv in (["trace", "--logit-bias", DIGITS + ":1", "Hi"], [b"trace", b"--system", b"\xff", b"Hi"]):
        proc = subprocess.run([sys.executable, "-m", "pipeline", *argv], cwd=ROOT, env=env, capture_output=True,
                              timeout=120)
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(("error: logit_bias: ", "error: system: ")), err


@pytest.mark.parametrize("argv, field", [
    (["trace", "Hi", "--json", "{long}"], "json"),
    (["report", "Hi", "--html", "{long}"], "html"),
    (["report", "Hi", "--html", "{tmp}/ok.html", "--json", "{long}"], "json"),
    (["cache-audit", EXAMPLE_LOG, "--json", "{long}"], "json"),
    (["cache-audit", "{long}"], "file"),
    (["trace", "Hi", "--json", "{tmp}/" + "a/" * 2100 + "x.json"], "json"),  # a path past 4,096 bytes
    (["trace", "Hi", "--json", "{tmp}/a\x00b.json"], "json"),  # a NUL (in-process only: no argv holds one)
])
def test_a_file_name_over_255_bytes_exits_2_naming_the_option(tmp_path, argv, field):
    long = str(tmp_path / ("a" * 300 + ".json"))
    code, out, err = run_cli(tmp_path, *(a.format(long=long, tmp=tmp_path) for a in argv))
    assert code == 2 and "Traceback" not in err, err
    assert err.startswith(f"error: {field}: ") and err.count("\n") == 1 and len(err) < 400, err
    assert out == "" and os.listdir(tmp_path) == ["not-a-folder"]  # nothing written, no temporary left


def test_a_file_name_of_255_bytes_is_written(tmp_path):
    """The temporary beside it (`.NAME.PID.THREAD.tmp`) would be past 255 bytes: it takes the name's digest."""
    target = tmp_path / ("é" * 125 + ".json")  # 250 + 5 bytes
    assert len(target.name.encode()) == 255
    code, _out, err = run_cli(tmp_path, "cache-audit", EXAMPLE_LOG, "--json", str(target))
    assert code == 0, err
    assert json.loads(target.read_text())["requests"]
    assert sorted(os.listdir(tmp_path)) == sorted(["not-a-folder", target.name])


def strict_json(text: str):
    """JSON as a strict reader takes it: NaN and Infinity (which Python's json writes by default) are errors."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", ["1e-320", "0.5", "1e-300", "nan", "-inf", "0"])
def test_a_prefill_speed_that_would_make_time_saved_infinite_is_refused(tmp_path, value):
    out = tmp_path / "audit.json"
    code, _out, err = run_cli(tmp_path, "cache-audit", EXAMPLE_LOG, f"--prefill-tps={value}", "--json", str(out))
    assert code == 2 and err.startswith("error: prefill_tps: must be a number of tokens per second of at least 1"), err
    assert "openai" not in err and not out.exists()  # one number for every provider: no provider is named


def test_the_slowest_prefill_speed_accepted_writes_strict_json(tmp_path):
    out = tmp_path / "audit.json"
    code, _out, err = run_cli(tmp_path, "cache-audit", EXAMPLE_LOG, "--prefill-tps", "1", "--json", str(out))
    assert code == 0, err
    totals = strict_json(out.read_text())["totals"]
    assert all(t["latency_saved_s"] == t["cached_tokens"] for t in totals.values())  # tokens / (1 token/s)


def test_a_repetition_penalty_that_would_make_scores_infinite_is_refused(tmp_path):
    """Found by the model tier's run: 1e-320 divided every seen token's score past float range (+inf), and the
    run stopped on `logits: holds NaN or +inf`, a field no one typed."""
    from pipeline.stages.penalties import penalized
    from pipeline.stages.request import MIN_REPETITION_PENALTY, GenerationOptions

    code, _out, err = run_cli(tmp_path, "trace", "--repetition-penalty=1e-320", "Hi")
    assert code == 2 and err.startswith("error: repetition_penalty: must be from 0.01 to 10"), err
    scores = penalized([30.0, -30.0, 1e-3], GenerationOptions(repetition_penalty=MIN_REPETITION_PENALTY), [0, 1, 2])
    assert scores.tolist() == pytest.approx([3000.0, -0.3, 0.1])


@pytest.mark.model
def test_a_sampled_trace_with_its_tensors_is_strict_json(tmp_path):
    """Masked tokens (top-k) score -inf inside the run: none of it reaches the file, which a strict reader takes."""
    out = tmp_path / "trace.json"
    code, _out, err = run_cli(tmp_path, "trace", "Hi", "--max-new-tokens", "2", "--temperature", "0.7", "--top-k", "5",
                              "--tensors", "--json", str(out), real_weights=True)
    assert code == 0, err
    trace = strict_json(out.read_text())
    assert len(trace["generated_token_ids"]) == 2 and trace["tensors"]["step_logits"]


def test_json_that_would_hold_nan_or_infinity_is_refused_and_the_old_file_kept(tmp_path):
    path = tmp_path / "out.json"
    path.write_text('{"old": true}')
    for bad in (float("nan"), float("inf"), [1.0, float("-inf")]):
        with pytest.raises(InputError, match="NaN or infinity") as e:
            write_json(str(path), {"totals": {"x": bad}}, "the audit")
        assert e.value.field == "json"
        assert path.read_text() == '{"old": true}' and os.listdir(tmp_path) == ["out.json"]
    write_json(str(path), {"x": 1e308, "y": -0.0}, "the audit")
    assert strict_json(path.read_text()) == {"x": 1e308, "y": -0.0}


# ---- cache-audit: roles no provider accepts ------------------------------------------------------------------------
def audit_log(tmp_path, *bodies) -> str:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies), encoding="utf-8")  # a surrogate as \udcff
    return str(path)


def chat(*roles: str) -> dict:
    return {"model": "gpt-4.1", "messages": [{"role": r, "content": f"{r} says hi"} for r in roles]}


@pytest.mark.parametrize("bad, shown", [("hacker", '"hacker"'), ("\udcff", '"\\udcff"'),
                                        ("us\ud800er", '"us\\ud800er"'), ("User", '"User"'), ("", '""')])
def test_a_role_no_provider_accepts_is_named_with_its_line(tmp_path, bad, shown):
    log = audit_log(tmp_path, chat("system", "user"), chat("system", "user", "assistant", "user"),
                    chat("system", bad, "user"))
    code, out, err = run_cli(tmp_path, "cache-audit", log)
    assert (code, out) == (2, "") and "Traceback" not in err, err
    assert err.startswith(f"error: log: request 3 (line 3), message 2: role {shown} is refused by every provider")
    assert err.count("\n") == 1


def test_a_responses_item_with_a_bad_role_is_named_and_items_without_one_pass(tmp_path):
    body = {"model": "gpt-4.1", "input": [{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"},
                                          {"type": "function_call", "name": "f", "arguments": "{}"},
                                          {"type": "function_call_output", "output": "3"}]}
    assert run_cli(tmp_path, "cache-audit", audit_log(tmp_path, body, body)).code == 0
    body["input"].append({"role": "root", "content": "obey"})
    code, _out, err = run_cli(tmp_path, "cache-audit", audit_log(tmp_path, body))
    assert code == 2 and err.startswith('error: log: request 1 (line 1), input item 5: role "root" is refused'), err


def test_every_role_some_provider_accepts_is_audited(tmp_path):
    openai = chat("system", "developer", "user", "assistant", "tool", "function", "user")
    anthropic = {"model": "claude-sonnet-4-5", "system": "rules",
                 "messages": chat("user", "assistant", "user")["messages"]}
    code, _out, err = run_cli(tmp_path, "cache-audit", audit_log(tmp_path, openai, openai, anthropic))
    assert code == 0, err


# ---- the messages that named another field than the one typed ----------------------------------------------------
@pytest.mark.parametrize("argv, field, not_named", [
    (["trace", "--system", "\udcff", "Hi"], "system", "messages"),  # was messages[0].content
    (["trace", "--system", "x" * 70_000, "Hi"], "system", "messages"),
    (["trace", "--system", "Be brief", "--", "\udcff"], "question", "messages"),  # was messages[1].content
    (["trace", "  "], "question", "messages"),  # was messages[-1].content
    (["explain", "x" * 70_000], "question", "messages"),
    (["speculate", "--system", "\ud800", "Hi"], "system", "messages"),
    (["report", "--html", "{tmp}/r.html", "--", ""], "question", "messages"),
    (["score", "--answer-to", "\udcff", "Paris."], "answer_to", "question"),  # was question
    (["score", "--answer-to", "Capital of France?", "\x1b[2J"], "text", "answer"),  # was answer
    (["speculate", "--drafts", "0", "Hi"], "drafts", "speculative"),  # was speculative
    (["explain", "--step", "5000", "Hi"], "step", "max_new_tokens"),  # was max_new_tokens ... got 5001
    (["explain", "--target", "-1", "Hi"], "target", None),  # was refused only once the model had loaded
    (["cache-audit", EXAMPLE_LOG, "--prefill-tps", "0"], "prefill_tps", "openai"),  # was 'prefill_tps: openai: ...'
    (["cache-audit", ""], "file", "folder"),  # was 'file:  is a folder'
    (["cache-demo", "--scenario", DIGITS], "scenario", DIGITS[:100]),  # the whole value quoted
])
def test_each_message_names_the_option_typed(tmp_path, argv, field, not_named):
    code, out, err = run_cli(tmp_path, *(a.format(tmp=tmp_path) for a in argv))
    assert (code, out) == (2, ""), err
    assert err.startswith(f"error: {field}: ") and err.count("\n") == 1, err
    assert not_named is None or not_named not in err, err
    if argv[:3] == ["explain", "--step", "5000"]:
        assert "got 5000" in err and "4,095" in err, err


def test_argparse_refusals_are_one_line_without_the_usage(tmp_path):
    code, out, err = run_cli(tmp_path, "trace", "--top-k", "many", "Hi")
    assert (code, out) == (2, "")
    assert err == "error: argument --top-k: invalid int value: 'many' (see python -m pipeline trace --help)\n"
    code, _out, err = run_cli(tmp_path, "cache-audit", EXAMPLE_LOG, "--provider", "x" * 5000)
    assert code == 2 and err.startswith("error: argument --provider: invalid choice: 'xxx") and len(err) < 400, err
    assert err.count("\n") == 1 and "openai" in err  # the choices are still said


def test_error_line_keeps_one_line_the_field_and_both_ends_of_a_long_value():
    line = error_line("json: /tmp/" + "a" * 5000 + ".json cannot be written: the name is too long.")
    assert line.startswith("json: /tmp/aaa") and line.endswith("a.json cannot be written: the name is too long.")
    assert len(line) < 150 and "…" in line
    assert error_line("stop: 'a\nb\r'") == "stop: 'a\\nb\\r'"
    assert len(error_line("x: " + "word " * 1000)) == MAX_LINE


# ---- after the model loads: the tiny model (fast tier) --------------------------------------------------------------
@pytest.mark.usefixtures("tiny_app")
def test_report_puts_the_forced_token_at_its_step(tmp_path):
    """`python -m ui report --force` was accepted and left out of the run (and its values never checked)."""
    out = tmp_path / "trace.json"
    code, _out, err = run_cli(tmp_path, "report", "Hi", "--force", "0:42", "--max-new-tokens", "1",
                              "--html", str(tmp_path / "r.html"), "--json", str(out), real_weights=True)
    assert code == 0, err
    trace = strict_json(out.read_text())
    assert trace["generated_token_ids"] == [42] and trace["steps"][0]["forced"] is True


@pytest.mark.usefixtures("tiny_app")
@pytest.mark.parametrize("argv, field", [
    (["trace", "--max-new-tokens", "1", "--", "a " * 30_000], "question"),  # the prompt past the 8,192-token window
    (["score", "--answer-to", "Why?", "--", "😀" * 15_000], "text"),  # too many tokens: was named `answer`
])
def test_errors_found_once_the_model_loads_name_the_option_typed(tmp_path, argv, field):
    code, _out, err = run_cli(tmp_path, *argv, real_weights=True)
    assert code == 2 and err.startswith(f"error: {field}: ") and err.count("\n") == 1, err
