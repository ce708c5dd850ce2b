"""What an audit states besides the numbers: what is estimated or assumed, and log-wide reasons a
provider caches nothing or refuses."""
from __future__ import annotations

from pipeline.prompt_cache.audit.log import LogRequest
from pipeline.prompt_cache.audit.records import RequestRecord
from pipeline.prompt_cache.audit.rules import PROVIDERS
from pipeline.text.counts import plural


def warnings(records: list[RequestRecord], rules: dict) -> list[str]:
    """Log-wide reasons a provider caches nothing or refuses: below a minimum, bad breakpoints."""
    out, n = [], len(records)
    low: dict[tuple[str, int], int] = {}
    refused: dict[str, int] = {}
    for rec in records:
        a = rec.anthropic
        if a.refused:
            refused[a.refused] = refused.get(a.refused, 0) + 1
        elif a.below_minimum:
            low[(a.model, a.min_tokens)] = low.get((a.model, a.min_tokens), 0) + 1
    for (model, least), k in low.items():
        out.append(f"Anthropic: in {k} of {plural(n, 'request')}, every breakpoint is before {model}'s minimum "
                   f"cacheable length ({least:,} tokens), so nothing of them is cached or written.")
    for reason, k in refused.items():
        out.append(f"Anthropic would refuse {k} of {plural(n, 'request')}: {reason}. Nothing of them is cached here.")
    short = sum(rec.prompt_tokens < rules["providers"]["openai"]["min_tokens"] for rec in records)
    if short:
        out.append(f"OpenAI caches nothing of {short} of {plural(n, 'request')}: under "
                   f"{rules['providers']['openai']['min_tokens']:,} tokens, the least it caches.")
    return out


def notes(requests: list[LogRequest], records: list[RequestRecord], tokenizer: str, rules: dict) -> list[str]:
    out = [rules["providers"][p]["tokenizer_note"].replace("{tokenizer}", tokenizer) for p in PROVIDERS]
    out.append(rules["rendering_note"])
    if all(r.ts is None for r in requests):
        out.append("The log has no timestamps: requests are taken as sent back to back, so nothing expires.")
    added = sum(1 for rec in records if rec.anthropic.breakpoints_added)
    if added:
        out.append(f"No cache_control in {added} of {plural(len(records), 'request')}: for the Anthropic column "
                   f"they get the breakpoints the docs recommend: end of tools/system, the block before the last, "
                   f"the last block.")
    return out


def rules_used(rules: dict) -> dict:
    return {p: {"rules": rules["providers"][p]["rules"], "label": rules["providers"][p]["label"]} for p in PROVIDERS}
