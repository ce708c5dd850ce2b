"""The model's real figure for each poll kind, from the same functions the pages draw it with (one definition):

  next_token      the first answer step's 8 best tokens and probabilities: `candidates` over the step's logits,
                  as Next token's "Top candidates" table (softmax at T = 1 over all V), named as that page names them
  tokens          the prompt's token count and pieces: `trace.tokens`, as the Tokens page counts them
  temperature     10 draws of the first answer token with the run's own settings and seed: `filter_stages` then
                  `draw`, as Next token's "Draw many times" with N = 10
  attention       layer L // 2, head 0 (Presenter mode's attention screen): the last position's weights over the
                  prompt, from `attention_for_layer`, as the Attention page and that screen compute them
  prompt_caching  the conversation scenario's second request: its tokens reused (the prompt-caching screen's rows)

Each returns a JSON-ready dict kept in the poll's record until Reveal.
"""
from __future__ import annotations

import random

import numpy as np

from pipeline.server.polls.record import MAX_CHOICES
from pipeline.stages.attention import attention_for_layer
from pipeline.stages.next_token import draw, filter_stages, first_answer_top
from pipeline.text.unfinished import continuation_label

TOP = 8  # next_token: the candidates shown beside the class's answers
DRAWS = 10  # temperature: "will these 10 draws all agree?"
MAX_TOKENS_SHOWN = 400  # tokens: the chips kept with the count (as Presenter mode's Tokens screen shows 400)


def attention_head(trace) -> tuple[int, int]:
    """(layer, head) an attention poll asks about: Presenter mode's attention screen's."""
    return trace.dims.L // 2, 0


def choices_for(kind: str, trace) -> list[str]:
    """What a learner picks from: attention's positions of the prompt ('(3) ␣the'), the last MAX_CHOICES of them;
    no list for the other kinds (next_token's shuffled 8 best: `poll_inputs(..., pick=True)`)."""
    if kind != "attention":
        return []
    T = len(trace.tokens)
    return [f"({i}) {trace.tokens[i].text}" for i in range(max(0, T - MAX_CHOICES), T)]


def real_figure(kind: str, trace, tokenizer, cache_rows: list[dict] | None = None) -> dict:
    """The model's answer to a poll of `kind` about `trace`'s request. cache_rows: the conversation scenario's rows
    (prompt_caching only)."""
    if kind == "next_token":
        return {"top": first_answer_top(tokenizer, trace, TOP)}
    if kind == "tokens":
        return {"count": len(trace.tokens), "answer": str(len(trace.tokens)),
                "tokens": [t.text for t in trace.tokens[:MAX_TOKENS_SHOWN]]}
    if kind == "temperature":
        options = trace.request.options
        final = filter_stages(trace.step_logits[0].astype(np.float64), options, trace.ids)[-1].probs  # (V,)
        picks = draw(final, DRAWS, np.random.default_rng(int(options.seed or 0)))  # (DRAWS,) token ids
        agree = len(set(picks.tolist())) == 1
        return {"temperature": float(options.temperature), "seed": int(options.seed or 0),
                "ids": [int(i) for i in picks],
                "draws": [continuation_label(tokenizer, trace.ids, int(i)) for i in picks],
                "agree": agree, "answer": "yes" if agree else "no"}
    if kind == "attention":
        layer, head = attention_head(trace)
        T = len(trace.tokens)
        row = attention_for_layer(trace.prefill, layer, first_row=T - 1, window=trace.dims.window(layer),
                                  head=head)[0, 0]  # (T,) the last position's weights
        start = max(0, T - MAX_CHOICES)
        weights = row[start:].astype(np.float64)  # (offered,) one per choice
        best = int(np.argmax(weights))
        return {"layer": layer, "head": head, "start": start, "weights": [round(float(w), 6) for w in weights],
                "answer": str(best), "position": start + best}
    if kind == "prompt_caching":
        if not cache_rows or len(cache_rows) < 2:
            raise ValueError("a prompt-caching poll needs the conversation scenario's rows")
        second = cache_rows[1]
        s = second["stats"]
        return {"label": str(second["label"]), "reused": int(s["tokens_reused"]), "tokens": int(s["n_tokens"]),
                "computed": int(s["tokens_computed"]), "answer": str(int(s["tokens_reused"]))}
    raise ValueError(f"no poll kind {kind!r}")


def poll_inputs(kind: str, trace, tokenizer, cache_rows: list[dict] | None = None, pick: bool = False) -> dict:
    """What `PollStore.open_poll` takes besides kind and question, for a poll about `trace`'s request:
    {"real": ..., "choices": ...} (a lesson's stage opens its poll with these). pick (next_token): learners pick
    among the model's 8 best tokens, shuffled, instead of typing a guess."""
    real = real_figure(kind, trace, tokenizer, cache_rows)
    choices = choices_for(kind, trace)
    if kind == "next_token" and pick:
        choices = [c["label"] for c in real["top"]]
        random.shuffle(choices)
    return {"real": real, "choices": choices}
