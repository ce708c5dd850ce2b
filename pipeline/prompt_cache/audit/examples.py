"""The prepared example logs (`assets/cache_audit/`): each app with a trap, and the same app fixed."""
from __future__ import annotations

from pipeline.core.errors import InputError
from pipeline.prompt_cache.audit.rules import ASSETS

EXAMPLES_DIR = ASSETS / "cache_audit"
EXAMPLES = {  # key -> (title, file)
    "support_chatbot_trap": ("Support chatbot: today's date and time first", "support_chatbot_trap.jsonl"),
    "support_chatbot_fixed": ("Support chatbot, fixed: the date at the end", "support_chatbot_fixed.jsonl"),
    "agent_tools_trap": ("Agent: tool list in a different order each call", "agent_tools_trap.jsonl"),
    "agent_tools_fixed": ("Agent, fixed: tools sorted by name", "agent_tools_fixed.jsonl"),
    "rag_json_trap": ("RAG app: JSON context with unstable key order", "rag_json_trap.jsonl"),
    "rag_json_fixed": ("RAG app, fixed: JSON with sorted keys", "rag_json_fixed.jsonl"),
    "long_chat_trap": ("Long conversation summarised at turn 8", "long_chat_trap.jsonl"),
    "long_chat_fixed": ("Long conversation, fixed: history kept", "long_chat_fixed.jsonl"),
}
EXAMPLE_TRAPS = {"support_chatbot": "date_or_id", "agent_tools": "tools_reordered",
                 "rag_json": "json_keys_reordered", "long_chat": "history_rewritten"}


def example_text(key: str) -> str:
    if key not in EXAMPLES:
        raise InputError("example", f"unknown example {key!r}; choose from {', '.join(EXAMPLES)}.")
    return (EXAMPLES_DIR / EXAMPLES[key][1]).read_text(encoding="utf-8")
