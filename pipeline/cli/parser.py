"""How the command line says that input is wrong: one short line on stderr, `error: FIELD: what to fix`, exit 2.

argparse's own refusals (an option's missing value, `--steps abc`, a choice not offered) print its usage block
and quote the value whole: a 5,000-digit value made a 5,000-character line. `CliParser` prints them as the
commands print an InputError, through `error_line`: one line, at most MAX_LINE characters, a long value cut.
"""
from __future__ import annotations

import argparse
import re

MAX_LINE = 300  # characters of one error line
MAX_WORD = 80  # a longer run without spaces (a value, a path) keeps its start and its end
_LONG_WORD = re.compile(r"\S{%d,}" % (MAX_WORD + 1))


def error_line(message: str) -> str:
    """'stop: is 5,000 characters; ...' as it is; line breaks shown as \\n, a long value cut in the middle,
    the whole cut to MAX_LINE characters: the line names the field first, so the cut keeps it."""
    text = message.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\r")
    text = _LONG_WORD.sub(lambda m: f"{m[0][:48]}…{m[0][-24:]}", text)
    return text if len(text) <= MAX_LINE else text[:MAX_LINE - 1] + "…"


# The functions a command calls name their own parameters; an error found once the model has loaded (a prompt past
# the context window, an answer of too many tokens) names the option the user typed instead. A command's parser
# says which (`set_defaults(typed_fields=...)`); what is checked before the model loads is named at the source.
REQUEST_FIELDS = {"messages": "question"}  # the request built from QUESTION and --system (check_fits)


def field_as_typed(field: str, args) -> str:
    """'answer' -> 'text' for `score TEXT --answer-to QUESTION`; a field the command does not map, as it is."""
    return getattr(args, "typed_fields", {}).get(field, field)


class CliParser(argparse.ArgumentParser):
    """argparse, whose refusals print `error: <one line> (see python -m pipeline trace --help)` and exit 2, without
    the usage block. The subcommands' parsers are of this class too (add_subparsers makes them of its own class)."""

    def error(self, message: str):
        self.exit(2, f"error: {error_line(f'{message} (see {self.prog} --help)')}\n")
