"""A finished run sent as a stream: how `stream: true` is answered when the answer must be whole first (logprobs come
from the captured run's scores; a response_format answer is decoded under its grammar, whole).

The chunks follow the run's own stream events (the text_delta events its decode loop made, each with the step whose
token completed it), so the text arrives in the same pieces as on a live stream, only all at once when the run ends.
Each piece carries the log-probabilities of the tokens that made it, as OpenAI's stream chunks carry
choices[].logprobs.content:

    events at steps 1 and 3 ('Hel', 'lo'), four answer tokens -> [('Hel', lp[0:2]), ('lo', lp[2:4])]
    tokens after the last text (held back, or their text trimmed by a stop string) -> a last piece ('', lp[k:])
"""
from __future__ import annotations

from pipeline.stages.decode_record import EventKind, StreamEvent


def pieces(events: list[StreamEvent], logprobs: list[dict] | None) -> list[tuple[str, list[dict] | None]]:
    """(text delta, the logprobs entries of the tokens that completed it, or None without logprobs) per text_delta
    event in order; logprobs: one entry per answer token (pipeline.api.logprobs.content_logprobs)."""
    out, start = [], 0
    for event in events:
        if event.kind != EventKind.TEXT_DELTA:
            continue
        end = event.step + 1 if logprobs is None else min(event.step + 1, len(logprobs))
        out.append((event.delta, None if logprobs is None else logprobs[start:end]))
        start = max(start, end)
    if logprobs is not None and start < len(logprobs):
        out.append(("", logprobs[start:]))
    return out
