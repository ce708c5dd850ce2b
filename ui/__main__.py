"""`python -m ui report "Are tomatoes fruit?" --html run.html`: the command line of ui/cli.py (`tpe`) under the
name it had before the console script, kept so that what was typed before still works."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ui import cli

PROG = "python -m ui"


def build_parser() -> argparse.ArgumentParser:
    return cli.build_parser(PROG)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
