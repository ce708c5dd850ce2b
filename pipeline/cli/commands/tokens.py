"""`python -m pipeline tokens TEXT`: the text cut by this model's tokenizer beside cl100k_base, o200k_base, llama3
and qwen3 (pipeline.stages.tokens): tokens, characters per token, the pieces and their ids."""
from __future__ import annotations

import argparse

from pipeline.core.errors import InputError
from pipeline.stages.request import check_text

NAME = "tokens"
HELP = "compare tokenizers on some text"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text")


def run(args) -> int:
    text = check_text("text", args.text)
    if not text:
        raise InputError("text", "give some text to tokenize.")
    from pipeline.model.loader import shared_model
    from pipeline.stages.tokens import compare

    for r in compare(text, shared_model().tokenizer):
        ratio = len(text) / r.count if r.count else 0.0
        print(f"{r.label:32s} {r.count:5d} tokens  {ratio:5.2f} chars/token")
        print("    " + " | ".join(r.pieces))
        print("    " + str(r.ids))
    return 0
