"""The room's schedule as rows a chart can draw: one per request the queue's running batch served
(anonymous: "you" for the learner's own request, a number for everyone else's), and the batch size per step.

    room_rows(queue.schedule(), own_key) -> {"rows": [...], "steps": [...], "own": row or None, "groups": [...]}

Each request's TTFT is named by the path of its prefill and its TPOT by the path of its decode steps
(pipeline.costs.named_time), with the device: medians are taken only over requests served the same way.
"""
from __future__ import annotations

import statistics

from pipeline.costs.named_time import ServedAs, grouped_by_serving, time_label

LAST_REQUESTS = 40  # requests drawn at most: the most recent ones


def served_label(quantity: str, path: str | None) -> str:
    """'TTFT (captured run)'; a time whose path was not recorded says so."""
    return f"{quantity} (path not recorded)" if path is None else time_label(quantity, path)


def room_rows(schedule: dict, own_key=None, last: int = LAST_REQUESTS) -> dict:
    """rows: {label, own, queued_s, prefill_at_s, prefill_s, decoding_from_s, left_s, ttft_s, tpot_s, tokens,
    ttft_label, tpot_label, device, model} in arrival order (times in seconds since the first request shown
    arrived); steps: {t_s, size}; groups: one per model and way of serving (prefill path, decode path, device)
    among the finished requests shown, {ttft_label, tpot_label, device, model, requests, ttft_s, tpot_s} with their
    medians (None: none)."""
    requests = schedule["requests"][-last:]
    t0 = min((r["queued_s"] for r in requests), default=0.0)
    rows, n = [], 0
    for r in requests:
        own = own_key is not None and r["key"] == own_key
        if not own:
            n += 1
        rows.append({"label": "you" if own else f"learner {n}", "own": own,
                     "queued_s": r["queued_s"] - t0, "prefill_at_s": r["prefill_at_s"] - t0,
                     "prefill_s": r["prefill_s"], "decoding_from_s": r["prefill_at_s"] + r["prefill_s"] - t0,
                     "left_s": None if r["left_s"] is None else r["left_s"] - t0,
                     "ttft_s": r["ttft_s"], "tpot_s": r["tpot_s"], "tokens": r["tokens"],
                     "ttft_label": served_label("TTFT", r.get("prefill_path")),
                     "tpot_label": served_label("TPOT", r.get("decode_path")), "device": r.get("device"),
                     "model": r.get("model")})
    steps = [{"t_s": s["t_s"] - t0, "size": len(s["members"])} for s in schedule["steps"] if s["t_s"] >= t0]
    return {"rows": rows, "steps": steps, "own": next((r for r in rows if r["own"]), None),
            "groups": served_groups([r for r in rows if r["left_s"] is not None])}


def served_groups(done: list[dict]) -> list[dict]:
    """The finished rows by how they were served (model, TTFT's path, TPOT's path, device), largest group first,
    each with its median TTFT and TPOT: times of different models, paths or devices are never pooled into one
    figure (a room serves both models in one queue)."""
    def median(rows, name):
        values = [r[name] for r in rows if r[name] is not None]
        return statistics.median(values) if values else None

    def served_as(r: dict) -> ServedAs:
        return ServedAs(r["ttft_label"], r["tpot_label"], r["device"], r.get("model"))

    return [{**served._asdict(), "requests": len(rows), "ttft_s": median(rows, "ttft_s"),
             "tpot_s": median(rows, "tpot_s")} for served, rows in grouped_by_serving(done, served_as)]


def first_view_start(rows: list[dict], end: float, share: float = 0.02) -> float:
    """Where the schedule's time axis starts when first drawn: 0 (everything) unless a typical request would then
    be thinner than `share` of the axis (a 4 s request on a 1,900 s axis is a 1-pixel line); then the arrival of
    the earliest request from which the median time in the room of it and those after it is at least that share of
    the axis. The reader zooms out for the rest."""
    spans = [(end if r["left_s"] is None else r["left_s"]) - r["queued_s"] for r in rows]
    for k, r in enumerate(rows):  # the widest window first
        if statistics.median(spans[k:]) >= share * max(end - r["queued_s"], 1e-9):
            return r["queued_s"]
    return rows[-1]["queued_s"] if rows else 0.0
