"""The fixes applied to a whole log: each body rewritten (`body_fixes`), earlier turns kept word for word
where the audit finds them rewritten, and the rewritten log audited again."""
from __future__ import annotations

import json
from dataclasses import replace

from pipeline.prompt_cache.audit import body_fixes as bf
from pipeline.prompt_cache.audit.log import MAX_LOG_BYTES, LogRequest, parse_log
from pipeline.prompt_cache.audit.records import AuditReport
from pipeline.prompt_cache.audit.render import read_ttl, render_blocks
from pipeline.prompt_cache.audit.replay import audit_requests


def fix_requests(requests: list[LogRequest], provider: str = "openai", rounds: int = 3,
                 **kwargs) -> tuple[list[LogRequest], dict[int, list[str]], AuditReport]:
    """The log rewritten to cache well, what changed per request number, and its audit.

    Each body: JSON keys sorted, tools sorted by name, a date/time/ID line near the start moved to
    the end of the last user message. Then, where the audit finds an earlier turn rewritten, the
    request gets the earlier request's history back, with its own new turns appended (repeated
    while new rewrites show up, at most `rounds` times).
    """
    changes: dict[int, set[str]] = {r.number: set() for r in requests}
    fixed = []
    for r in requests:
        body, what = bf.fix_body(r.body, r.shape)
        changes[r.number] |= what
        fixed.append(_rebuilt(r, body))
    report = audit_requests(fixed, provider, **kwargs)
    for _ in range(rounds):
        rewrites = {i: rec.matched_request - 1 for i, rec in enumerate(report.requests)
                    if rec.trap == "history_rewritten"}
        if not rewrites:
            break
        fixed = _keep_history(fixed, rewrites, changes)
        report = audit_requests(fixed, provider, **kwargs)
    return fixed, {n: sorted(c) for n, c in changes.items()}, report


def _rebuilt(r: LogRequest, body: dict) -> LogRequest:
    """r with a rewritten body (rendered again)."""
    blocks, tools = render_blocks(body, r.shape, r.where)
    auto = read_ttl(body["cache_control"], r.where) if "cache_control" in body else None
    return replace(r, body=body, blocks=blocks, tool_names=tools, auto_cache=auto)


def _keep_history(requests: list[LogRequest], rewrites: dict[int, int], changes) -> list[LogRequest]:
    """Give each rewritten request the history of the request it rewrote, plus its new turns; requests
    that continue a rewritten one follow it."""
    out: list[LogRequest] = []
    by_history: dict[tuple, LogRequest] = {}  # original messages (keys) -> fixed request
    for i, r in enumerate(requests):
        msgs = bf.messages_of(r.body, r.shape)
        keys = tuple(bf.message_key(m) for m in msgs)
        new = r
        if i in rewrites:
            new = _splice(r, out[rewrites[i]], msgs)
        else:
            for cut in range(len(keys) - 1, 0, -1):  # continues a request that was rewritten?
                base = by_history.get(keys[:cut])
                if base is not None:
                    new = _rebuilt(r, bf.with_history(r.body, r.shape, base.body,
                                                      bf.messages_of(base.body, r.shape) + msgs[cut:]))
                    break
        if new is not r:
            changes[r.number].add("kept_history")
            by_history[keys] = new
        out.append(new)
    return out


def _splice(r: LogRequest, base: LogRequest, msgs: list[dict]) -> LogRequest:
    """base's messages, then r's messages after the last one both share word for word (or, if none is
    shared, r's last message)."""
    old = bf.messages_of(base.body, base.shape)
    old_keys = [bf.message_key(m) for m in old]
    for k in range(len(msgs) - 1, -1, -1):
        key = bf.message_key(msgs[k])
        if key in old_keys and len(str(msgs[k].get("content", ""))) >= 20:
            at = len(old_keys) - 1 - old_keys[::-1].index(key)
            return _rebuilt(r, bf.with_history(r.body, r.shape, base.body, old[:at + 1] + msgs[k + 1:]))
    return _rebuilt(r, bf.with_history(r.body, r.shape, base.body, old + msgs[-1:]))


def fixed_log_text(requests: list[LogRequest]) -> str:
    """JSONL of the fixed bodies (with their timestamps as wrappers), ready to download."""
    lines = []
    for r in requests:
        entry = {"ts": r.ts, "body": r.body} if r.ts is not None else r.body
        lines.append(json.dumps(entry, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def audit_fixes(text: str, provider: str = "openai", max_bytes: int | None = MAX_LOG_BYTES, **kwargs) -> dict:
    """Before and after the fixes: both reports, what changed per request, and the fixed log."""
    requests = parse_log(text, max_bytes)
    before = audit_requests(requests, provider, **kwargs)
    fixed, changes, after = fix_requests(requests, provider, **kwargs)
    return {"before": before, "after": after, "changes": changes, "fixed_log": fixed_log_text(fixed)}
