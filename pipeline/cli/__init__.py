"""Command line: `python -m pipeline trace|tokens|cache-demo|cache-audit|serving|score|explain|speculate|
temperature-zero|lesson ...`, the commands pipeline/ can run; `tpe` (ui/cli.py) is the same command line plus `report`.

Each command is one module of pipeline/cli/commands/ with the same four names (NAME, HELP, `add_arguments(parser)`,
`run(args) -> int`), listed once in COMMANDS; `build_parser` makes a subcommand of each. What a user typed is
checked before torch is imported or the model is loaded, so bad input is refused at once with exit code 2 and one
short line naming the option (pipeline.cli.parser); only a `--force` token id waits for the model, whose vocabulary
size V it is checked against. Output files are checked first too, and written atomically as strict JSON (a failed
write keeps the old file and exits 2). The HTML report is a command of the layer above (ui/report_command.py, in
`tpe` and `python -m ui`): pipeline/ imports nothing from ui/ or views/. `cache-audit` never imports torch. All that
is printed shows control characters escaped (pipeline.cli.terminal).

  commands/      one module per command
  arguments.py   what every command shares: the request, the --model check, output files
  parser.py      bad input said in one line, exit 2
  terminal.py    what is printed, control characters escaped
  trace_text.py  a readable walk through a trace, stage by stage, for the terminal (`trace`)
  commitment_text.py  where each answer token was decided, for the terminal (`trace --commitment`)
  samples_text.py  N samples side by side and where they disagree, for the terminal (`trace --samples`)
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from pipeline.cli.commands import (cache_audit, cache_demo, explain, lesson, score, serving, speculate,
                                   temperature_zero, tokens, trace)
from pipeline.cli.parser import CliParser, error_line, field_as_typed
from pipeline.cli.terminal import safe_output
from pipeline.core.errors import InputError
from pipeline.server.process import quiet_library_noise

# The registry: every command of `python -m pipeline`, in the order `--help` lists them.
COMMANDS: tuple[ModuleType, ...] = (trace, tokens, cache_demo, cache_audit, serving, score, explain, speculate,
                                    temperature_zero, lesson)
PROG = "python -m pipeline"
# Commands of the layer above, which pipeline/ cannot run: the line `python -m pipeline NAME` prints instead.
ELSEWHERE = {"report": "the HTML report is made by ui/, the layer above pipeline/: run `tpe report ...` "
                       "(or `python -m ui report ...`) with the same options."}


@functools.cache
def build_parser(commands: Sequence[ModuleType] = COMMANDS, prog: str = PROG,
                 description: str | None = __doc__) -> argparse.ArgumentParser:
    """A subcommand per command module, made the same way for each: its NAME, its HELP, its add_arguments.
    Made once per process for each (commands, prog, description) passed, since parsing leaves a parser as it was:
    building it (every command's options, argparse's messages looked up in gettext's catalogues) takes ~2-4 ms, which
    a process that runs the command line many times (the tests' in-process runs) paid on every run. The parser is
    shared: a caller adds nothing to it, and a command's run() never changes a value in place that may be a default
    (an append option's list is the parser's own when the option was not given)."""
    parser = CliParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands:
        command.add_arguments(sub.add_parser(command.NAME, help=command.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m pipeline ...`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in ELSEWHERE:
        print(f"error: {argv[0]}: {ELSEWHERE[argv[0]]}", file=sys.stderr)
        return 2
    return run_command(build_parser(), COMMANDS, argv)


def run_command(parser: argparse.ArgumentParser, commands: Sequence[ModuleType], argv=None) -> int:
    """Parse argv and run its command's `run`: bad input exits 2 with a message naming the field (also `tpe`)."""
    # transformers' progress bars redraw with '\r', which the terminal filter shows escaped; loading takes ~1 s
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    quiet_library_noise()  # torchao's and torch's import-time lines: stderr shows only what concerns the user
    by_name = {command.NAME: command for command in commands}
    with safe_output():
        args = parser.parse_args(argv)
        try:
            return by_name[args.command].run(args)
        except InputError as e:  # bad input, a --model folder that is not a model, a cache folder that fails
            print(f"error: {error_line(f'{field_as_typed(e.field, args)}: {e.message}')}", file=sys.stderr)
            return 2
        except BrokenPipeError:  # `... | head`: the reader has gone; say nothing more (Python's docs' recipe)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
