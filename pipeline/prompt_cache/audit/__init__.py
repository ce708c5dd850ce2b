"""Prompt-cache audit: a real request log replayed under OpenAI's, Anthropic's and vLLM's published
caching rules, request by request, with the reason for each miss and the bill.

Steps (records out, for the page, the CLI and the tests), one module each:
1. `log`: each request is read; `render` turns it into the blocks a provider caches over (tools, system,
   messages); `tokens` counts them with one tokenizer (o200k_base: OpenAI's public one; a stated
   stand-in for Anthropic and vLLM). Identical text pieces are tokenized once.
2. `radix`: a radix tree over the token ids of every request sent so far finds, in one walk per
   request, the longest prefix shared with any earlier request still alive under each provider's TTL.
3. `rules` (`assets/cache_rules.json`, each with its source) turn that into the cached tokens each
   provider would report; `anthropic` simulates Anthropic breakpoint by breakpoint. `replay` runs it.
4. `explain` and `traps`: the first divergent token is explained: the classic traps are named, with the fix.
5. `bill` prices it (editable table); `body_fixes` rewrites each body and `fixes` audits the rewritten log again.
`records` holds the dataclasses all of these return; `volatile` finds dates, IDs and JSON in text; `notes` states what
is estimated or assumed; `examples` are the prepared example logs; `json_out` writes the whole audit as JSON.

Token sequences are bytes, 4 per token (uint32, little-endian): slices compare at memcmp speed.
Shape letters: T tokens of one request, N requests.
"""
from pipeline.prompt_cache.audit.bill import bill, check_prices, prefill_speeds, request_cost
from pipeline.prompt_cache.audit.body_fixes import FIX_WORDS
from pipeline.prompt_cache.audit.examples import EXAMPLE_TRAPS, EXAMPLES, EXAMPLES_DIR, example_text
from pipeline.prompt_cache.audit.fixes import audit_fixes, fix_requests, fixed_log_text
from pipeline.prompt_cache.audit.json_out import report_json
from pipeline.prompt_cache.audit.log import MAX_LOG_BYTES, LogRequest, parse_log, read_log_file
from pipeline.prompt_cache.audit.radix import PrefixTree
from pipeline.prompt_cache.audit.records import AnthropicResult, AuditReport, Divergence, RequestRecord
from pipeline.prompt_cache.audit.replay import audit_log, audit_requests
from pipeline.prompt_cache.audit.rules import (
                    PROVIDERS,
                    anthropic_min_tokens,
                    default_prefill_tps,
                    default_prices,
                    load_rules,
                    openai_cached,
                    vllm_cached,
)
from pipeline.prompt_cache.audit.tokens import encoding
from pipeline.prompt_cache.audit.traps import CAUSES, TRAPS, cause_words

__all__ = ["AnthropicResult", "AuditReport", "CAUSES", "Divergence", "EXAMPLES", "EXAMPLES_DIR", "EXAMPLE_TRAPS",
           "FIX_WORDS", "LogRequest", "MAX_LOG_BYTES", "PROVIDERS", "PrefixTree", "RequestRecord", "TRAPS",
           "anthropic_min_tokens", "audit_fixes", "audit_log", "audit_requests", "bill", "cause_words", "check_prices",
           "default_prefill_tps", "default_prices", "encoding", "example_text", "fix_requests", "fixed_log_text",
           "load_rules", "openai_cached", "parse_log", "prefill_speeds", "read_log_file", "report_json",
           "request_cost", "vllm_cached"]
