"""`python -m pipeline score TEXT [--answer-to QUESTION] [--json OUT]`: teacher forcing on any text, or on an
answer under the chat template after QUESTION (pipeline.training.score). Prints each token's probability,
rank, surprisal and loss, then the mean loss and perplexity; `--json` writes `ids`, `tokens: [{"id",
"logprob"}]` (the first, or every prompt token before an answer, has null) and `mean_loss`."""
from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from pipeline.cli.arguments import check_model_arg, write_json

if TYPE_CHECKING:
    from pipeline.model.interface import LanguageModel


NAME = "score"
HELP = "score any text under teacher forcing: the probability of each true next token, mean loss, perplexity"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", help="the text to score, or with --answer-to the answer you expect")
    p.add_argument("--answer-to", default=None, metavar="QUESTION",
                   help="score TEXT as the answer to QUESTION, after the chat template's prompt")
    p.add_argument("--json", dest="json_file", default=None, help="write ids, tokens and mean_loss to this file")
    p.add_argument("--model", default=None, help="smollm2-135m (the default), gemma-3-270m, or a local folder")
    p.add_argument("--plain", action="store_true", help="with --answer-to: the question as plain text, no chat format")
    p.set_defaults(typed_fields={"answer": "text", "question": "answer_to"})  # answer_ids(lm, question, answer)


def run(args) -> int:
    from pipeline.core.files import check_output_file
    from pipeline.training.score import check_score_text

    check_score_text("text", args.text)
    if args.answer_to is not None:
        check_score_text("answer_to", args.answer_to)
    check_output_file(args.json_file, "json")
    check_model_arg(args.model)
    from pipeline.model.loader import load_model, shared_model
    from pipeline.model.registry import resolve
    from pipeline.text.pieces import token_pieces
    from pipeline.training.score import answer_ids, score_ids, text_ids

    lm = load_model(args.model) if args.model and resolve(args.model).is_local else shared_model(args.model)
    if args.answer_to is None:
        ids, start = text_ids(lm, args.text), 1
    else:
        ids, start = answer_ids(lm, args.answer_to, args.text, "plain" if args.plain else "chat")
    score = score_ids(lm, ids, start)
    labels = [p.label for p in token_pieces(lm.tokenizer, ids)]
    print(f"{lm.name}: {len(score.scored)} tokens scored" +
          (f" after a prompt of {start} tokens" if start > 1 else ""))
    print(f"{'#':>4s} {'token':24s} {'p':>8s} {'rank':>7s} {'bits':>6s} {'nats':>6s}  model preferred")
    for t in score.scored:
        preferred = "" if score.ranks[t] == 1 else f"{labels_of(lm, score.top_ids[t])} ({score.top_probs[t]:.1%})"
        print(f"{t:4d} {labels[t][:24]:24s} {score.prob(t):8.2%} {score.ranks[t]:7,d} {score.surprisal_bits(t):6.2f} "
              f"{-score.logprobs[t]:6.2f}  {preferred}")
    print(f"mean loss {score.mean_loss:.4f} nats, perplexity {math.exp(score.mean_loss):,.2f}")
    if args.json_file:
        write_json(args.json_file, score.to_json(), "the score")
        print(f"\nWrote the score to {args.json_file}")
    return 0


def labels_of(lm: LanguageModel, token_id: int) -> str:
    from pipeline.text.pieces import token_pieces

    return token_pieces(lm.tokenizer, [token_id])[0].label
