"""`python -m pipeline cache-audit`: the table in words, the JSON it writes, bad logs and values that crashed it
exiting 2 with the message, and no torch imported (fast tier, no model weights)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kit.audit_logs import HUGE, USER_HI, jsonl
from kit.cli import run_cli

from pipeline.cli import main
from pipeline.prompt_cache import audit as ca

ROOT = Path(__file__).resolve().parents[2]


# ---- the command line ------------------------------------------------------------------------------
def test_cli_table_names_causes_in_words(tmp_path, capsys):
    """The terminal's table said `new_content` and `first` where the page now says words: one mapping for both."""
    path = ca.EXAMPLES_DIR / ca.EXAMPLES["rag_json_trap"][1]
    assert main(["cache-audit", str(path)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if re.match(r"\s+\d+ ", line)]
    assert rows and rows[0].endswith("the first request"), rows[0]
    assert not [r for r in rows if re.search(r"\b[a-z]+_[a-z_]+\b", r)], rows


def test_cli_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "audit.json"
    path = ca.EXAMPLES_DIR / ca.EXAMPLES["rag_json_trap"][1]
    assert main(["cache-audit", str(path), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "TRAP: JSON keys reordered" in printed and "anthropic" in printed
    data = json.loads(out.read_text())
    rec = data["requests"][1]
    for key in ("index", "prompt_tokens", "shared_prefix_tokens", "first_divergent_index", "trap", "cached_tokens",
                "cost"):
        assert key in rec
    assert set(rec["cached_tokens"]) == set(rec["cost"]) == {"openai", "anthropic", "vllm"}
    assert rec["trap"] == "json_keys_reordered" and set(data["totals"]) == {"openai", "anthropic", "vllm"}
    assert data["prefill_tps"] == ca.default_prefill_tps() and isinstance(data["warnings"], list)
    assert main(["cache-audit", str(path), "--json", str(out), "--prefill-tps", "2000"]) == 0
    assert set(json.loads(out.read_text())["prefill_tps"].values()) == {2000.0}


def test_records_are_built_once_and_are_what_the_json_holds(tmp_path):
    """A request's record is a frozen dataclass (no dict filled in later, no reads by key); --json holds its
    fields in order."""
    from dataclasses import FrozenInstanceError, fields

    report = ca.audit_log(ca.example_text("rag_json_trap"))
    rec = report.requests[1]
    with pytest.raises(FrozenInstanceError):
        rec.trap = None
    with pytest.raises(FrozenInstanceError):
        rec.anthropic.refused = "x"
    assert rec.trap == "json_keys_reordered" and rec.divergence.token
    with pytest.raises(TypeError):
        rec["trap"]  # read by attribute only: the dict-style reads (the old CLI table's) are gone
    out = tmp_path / "audit.json"
    assert main(["cache-audit", str(ca.EXAMPLES_DIR / ca.EXAMPLES["rag_json_trap"][1]), "--json", str(out)]) == 0
    row = json.loads(out.read_text())["requests"][1]
    assert list(row) == [f.name for f in fields(ca.RequestRecord)] + ["cost"]
    assert list(row["anthropic"]) == [f.name for f in fields(ca.AnthropicResult)]
    assert row["divergence"]["other_token"] == rec.divergence.other_token
    assert row["anthropic"]["cache_read_input_tokens"] == rec.anthropic.cache_read_input_tokens

def test_cli_bad_input_exits_2_with_the_message(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"oops": 1}\n')
    code, _out, err = run_cli(tmp_path, "cache-audit", str(path))
    assert code == 2
    assert "request 2 (line 2)" in err
    assert run_cli(tmp_path, "cache-audit", str(tmp_path / "missing.jsonl")).code == 2


def test_cli_does_not_import_torch():
    """A subprocess: the test process has torch imported already; a fresh one shows what the CLI imports."""
    code = ("import sys; from pipeline.cli import main; "
            f"assert main(['cache-audit', {str(ca.EXAMPLES_DIR / 'support_chatbot_trap.jsonl')!r}]) == 0; "
            "assert not {'torch', 'transformers', 'streamlit'} & set(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("line, args, field", [
    ('{"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": [{"type": "text", "text": "a", '
     '"cache_control": {"type": "ephemeral", "ttl": [1]}}]}]}', [], "cache_control ttl"),
    ('{"cache_control": {"ttl": {"a": 1}}, "messages": ' + USER_HI + '}', [], "cache_control ttl"),
    ('{"ts": ' + HUGE + ', "messages": ' + USER_HI + '}', [], "`ts`"),
    ('{"ts": -' + HUGE + ', "body": {"messages": ' + USER_HI + '}}', [], "`ts`"),
    ('{"output_tokens": ' + HUGE + ', "body": {"messages": ' + USER_HI + '}}', [], "`output_tokens`"),
    ('{"messages": ' + USER_HI + '}', ["--output-tokens", HUGE], "output_tokens"),
])
def test_cli_unhashable_or_huge_values_exit_2_naming_the_field(tmp_path, line, args, field):
    path = tmp_path / "log.jsonl"
    path.write_text(line + "\n")
    code, _out, err = run_cli(tmp_path, "cache-audit", str(path), *args)
    assert code == 2
    assert err.startswith("error: ") and field in err and "Traceback" not in err


def test_lone_surrogate_in_tool_call_id_model_or_tool_name_is_audited(tmp_path):
    """A lone surrogate in a role is refused (tests/cli/test_cli_inputs.py): no provider has such a role."""
    message = {"role": "tool", "tool_call_id": "call\udc00", "content": "3 passed"}
    body = {"model": "gpt-4.1\ud800", "tools": [{"name": "se\ud800arch", "parameters": {}}],
            "messages": [{"role": "user", "content": "hi"}, message]}
    path, out = tmp_path / "log.jsonl", tmp_path / "audit.json"
    path.write_text(jsonl(body, body), encoding="utf-8")  # json.dumps writes the surrogate as \ud800
    assert main(["cache-audit", str(path), "--json", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["requests"][1]["cause"] == "identical"
    assert data["requests"][0]["model"] == "gpt-4.1\ufffd"
