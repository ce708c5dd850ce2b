"""The command line is one list of commands, each registered the same way (fast tier, no model weights).

Every command is a module with NAME, HELP, `add_arguments(parser)` and `run(args)`: pipeline's in
pipeline/cli/commands/ (listed in pipeline.cli.COMMANDS), the HTML report in ui/report_command.py (ui/cli.py adds
it). The console script `tpe` (pyproject.toml) lists them all; `python -m pipeline` runs pipeline's, and
`python -m pipeline report` names where the report is; `python -m ui` is `tpe` under its older name.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

from kit.cli import run_cli
from kit.paths import ROOT

from pipeline import cli
from ui import cli as ui_cli

COMMANDS_DIR = Path(ROOT) / "pipeline" / "cli" / "commands"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, str]:
    """{name: its help line} of a parser's subcommands, in the order --help lists them."""
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {action.dest: action.help for action in sub._choices_actions}


def test_every_command_module_has_the_same_pair():
    """Each registered module: NAME and HELP strings, add_arguments(parser) and run(args), one parameter each."""
    for command in ui_cli.COMMANDS:
        where = command.__name__
        assert isinstance(command.NAME, str) and re.fullmatch(r"[a-z][a-z-]*", command.NAME), where
        assert isinstance(command.HELP, str) and command.HELP.strip(), where
        for function in ("add_arguments", "run"):  # the parser, then the parsed arguments: one parameter each
            assert callable(getattr(command, function, None)), f"{where} has no {function}"
            assert len(inspect.signature(getattr(command, function)).parameters) == 1, f"{where}.{function}"
    names = [c.NAME for c in ui_cli.COMMANDS]
    assert len(names) == len(set(names)), names


def test_every_module_in_the_commands_folder_is_registered():
    """A command module written and left out of COMMANDS would be unreachable: the folder and the list agree."""
    modules = {importlib.import_module(f"pipeline.cli.commands.{p.stem}") for p in COMMANDS_DIR.glob("*.py")
               if p.name != "__init__.py"}
    assert modules == set(cli.COMMANDS)
    assert ui_cli.COMMANDS[:len(cli.COMMANDS)] == cli.COMMANDS  # tpe: pipeline's commands, then the report
    assert [c.__name__ for c in ui_cli.COMMANDS[len(cli.COMMANDS):]] == ["ui.report_command"]


def test_the_parsers_are_made_from_the_registry():
    """Each parser's subcommands are its registry's NAMEs with their HELP lines, in the registry's order."""
    assert subcommands(cli.build_parser()) == {c.NAME: c.HELP for c in cli.COMMANDS}
    assert subcommands(ui_cli.build_parser()) == {c.NAME: c.HELP for c in ui_cli.COMMANDS}
    from ui.__main__ import build_parser as python_m_ui

    assert subcommands(python_m_ui()) == subcommands(ui_cli.build_parser())


def tpe_script() -> Path:
    """The console script pip installed beside this interpreter (run.sh installs the project editable)."""
    return Path(sys.executable).parent / "tpe"


def test_the_tpe_console_script_lists_every_command():
    """The real script, as a user runs it from another folder (a subprocess: its point is the installed entry)."""
    script = tpe_script()
    assert script.exists(), f"{script} missing: reinstall the project (pip install --no-deps --no-build-isolation -e .)"
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120, cwd="/",
                          env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr
    listed = re.findall(r"^    ([a-z][a-z-]*) ", done.stdout, flags=re.MULTILINE)
    assert listed == [c.NAME for c in ui_cli.COMMANDS], done.stdout
    assert done.stdout.startswith("usage: tpe ")


def test_tpe_runs_a_command_and_refuses_bad_input_as_the_module_does(tmp_path):
    """`tpe trace` with a bad option exits 2 naming `tpe trace --help`, as `python -m pipeline trace` names its own."""
    done = subprocess.run([str(tpe_script()), "trace", "hi", "--top-k", "many"], capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == "error: argument --top-k: invalid int value: 'many' (see tpe trace --help)\n"


def test_python_m_pipeline_runs_its_commands_and_names_where_the_report_is(capsys, tmp_path):
    """pipeline/ cannot make the HTML (ui/ does, and pipeline/ never imports ui/): `python -m pipeline report` exits 2
    with one line naming `tpe report`, and writes nothing; pipeline's own commands parse as before."""
    code, out, err = run_cli(tmp_path, "trace", "--help")
    assert code == 0 and out.startswith("usage: python -m pipeline trace "), err
    assert cli.main(["report", "Hi", "--html", str(tmp_path / "r.html")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("error: report: ") and "`tpe report ...`" in captured.err
    assert not (tmp_path / "r.html").exists()
