"""Request logs for the cache audit's tests, written by hand: an OpenAI chat body, an Anthropic body with a system
prompt of a given length in o200k tokens and a breakpoint after it, JSONL of several; the length of two token lists'
shared prefix; values that crashed the audit once (a number of 400 digits)."""
import json

HUGE = "9" * 400
USER_HI = '[{"role": "user", "content": "hi"}]'


def chat(system: str, user: str, model: str = "gpt-4.1") -> dict:
    return {"model": model, "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def jsonl(*entries) -> str:
    return "\n".join(json.dumps(e) for e in entries)


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def system_of(tokens: int) -> str:
    """' cat' is one o200k token: k of them are k tokens."""
    return " cat" * tokens


def anthropic_body(system_tokens: int, question: str, model="claude-sonnet-4-5", ttl=None) -> dict:
    mark = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return {"model": model, "max_tokens": 100,
            "system": [{"type": "text", "text": system_of(system_tokens), "cache_control": mark}],
            "messages": [{"role": "user", "content": question}]}
