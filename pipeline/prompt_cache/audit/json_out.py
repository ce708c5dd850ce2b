"""The whole audit as JSON (the CLI's --json)."""
from __future__ import annotations

from dataclasses import asdict

from pipeline.prompt_cache.audit.records import AuditReport


def report_json(report: AuditReport, costs: dict) -> dict:
    """The whole audit as JSON: per request (index, prompt_tokens, shared_prefix_tokens,
    first_divergent_index, trap, cached_tokens by provider, cost by provider, ...) and the totals."""
    requests = [{**asdict(rec), "cost": costs["requests"][i]} for i, rec in enumerate(report.requests)]
    return {"provider": report.provider, "tokenizer": report.tokenizer, "requests": requests,
            "totals": costs["totals"], "prices": costs["prices"], "prefill_tps": costs["prefill_tps"],
            "notes": report.notes, "warnings": report.warnings, "rules": report.rules, "prefix_tree": report.tree}
