"""Prompt-caching scenarios: a conversation, the classic traps, and each trap fixed.

Every scenario is a list of stateless requests played in order through one fresh PrefixCache.
The rule behind all the fixes: stable content first, variable content last, and the same bytes
for the same content every time (fixed order, fixed serialisation, fixed template).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .options import ChatRequest
from .prefix_cache import HIT, MISS, NOT_CACHEABLE, RECOMPUTED, PrefixCache, PrefixCacheConfig
from .render import html_text, piece_bytes, render_bytes
from .template import describe_tokens, segments, tokenize_segments

INSTRUCTIONS = """You are Tilly, the assistant of a community tomato garden.
Rules for every answer:
1. Answer in at most three short sentences, in plain words a beginner understands.
2. If a question is about plant disease, name the most likely cause first, then one simple check the gardener can do.
3. Never recommend a chemical product by brand name; describe the kind of treatment instead.
4. Watering advice depends on the weather: ask for the temperature if it is missing.
5. Our garden has twelve raised beds, a rain-water tank and a shared tool shed that opens at eight.
6. Members may take seedlings from the greenhouse on Saturdays only, two trays per family.
7. If you do not know, say so and suggest asking the volunteers at the Saturday meeting."""

QUESTION_1 = "My tomato leaves have yellow spots. What should I do?"
QUESTION_2 = "How often should I water seedlings in a heat wave?"
ANSWER_1 = ("Yellow spots are most often early blight, a fungus. Check whether the lowest leaves were hit "
            "first; if so, remove them and water at the base, not on the leaves.")
QUESTION_3 = "Can I take seedlings home on a Wednesday?"
ANSWER_2 = "Every morning before nine, and again in the evening if the soil is dry two centimetres down."
QUESTION_4 = "Where do I find a watering can?"
ANSWER_3 = "No: seedlings can be taken on Saturdays only, two trays per family."

TOOLS = {
    "weather_forecast": {"description": "Forecast for the garden for the next three days.",
                         "parameters": {"days": "integer, 1 to 3"}},
    "bed_schedule": {"description": "Who looks after each raised bed this week.",
                     "parameters": {"bed": "integer, 1 to 12"}},
    "tank_level": {"description": "How full the rain-water tank is, in litres.", "parameters": {}},
    "seedling_stock": {"description": "Seedling trays left in the greenhouse, by variety.",
                       "parameters": {"variety": "text, optional"}},
}
MEMBER_FIELDS = [("name", "Alice Martin"), ("member_since", "2021"), ("bed", 7), ("plan", "family"),
                 ("allergies", "none"), ("language", "English"), ("volunteer", True)]

# A template change: a new app version puts a blank line after every role header.
NEW_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n\n' + message['content'] "
                "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n\n' }}"
                "{% endif %}")


@dataclass(frozen=True)
class Prompt:
    label: str  # short name of the request in the conversation
    messages: tuple[tuple[str, str], ...]  # (role, content); the last is the new user question
    note: str = ""  # what changed since the previous request, in words
    template: str | None = None  # None: the model's own chat template


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    kind: str  # conversation | trap | fixed
    lesson: str  # one sentence: why it misses, or why the fix hits
    prompts: tuple[Prompt, ...]


def _conversation() -> Scenario:
    turns = [(QUESTION_1, ANSWER_1), (QUESTION_2, ANSWER_2), (QUESTION_3, ANSWER_3), (QUESTION_4, None)]
    prompts, history = [], [("system", INSTRUCTIONS)]
    for n, (question, answer) in enumerate(turns, start=1):
        prompts.append(Prompt(f"Turn {n}", tuple(history + [("user", question)]),
                              "first request" if n == 1 else "the history is resent, one question-answer pair longer"))
        history += [("user", question), ("assistant", answer or "")]
    return Scenario("conversation", "A conversation, turn by turn", "conversation",
                    "Each request resends the whole history; everything already seen is read back from the cache.",
                    tuple(prompts))


def _trap_or_fix(key: str, fixed: bool, prompts: tuple[Prompt, ...], trap: tuple[str, str],
                 fix: tuple[str, str]) -> Scenario:
    """One scenario of a trap/fix pair; trap and fix are (title, lesson)."""
    title, lesson = fix if fixed else trap
    kind = "fixed" if fixed else "trap"
    return Scenario(f"{key}_{kind}", title, kind, lesson, prompts)


def _two_requests(systems: list[str], note: str) -> tuple[Prompt, ...]:
    """Request 1 and 2: each with its own system text, then QUESTION_1 / QUESTION_2."""
    return tuple(Prompt(f"Request {n}", (("system", system), ("user", question)), "" if n == 1 else note)
                 for n, (system, question) in enumerate(zip(systems, (QUESTION_1, QUESTION_2)), start=1))


def _date_first(fixed: bool) -> Scenario:
    days = [("Friday 14 March 2025", "Alice"), ("Saturday 15 March 2025", "Bob")]
    prompts = []
    for n, ((day, user), question) in enumerate(zip(days, (QUESTION_1, QUESTION_2)), start=1):
        header = f"Today is {day}. You are talking to {user}."
        system = f"{INSTRUCTIONS}\n{header}" if fixed else f"{header}\n{INSTRUCTIONS}"
        prompts.append(Prompt(f"Request {n}: {user}, {day.split()[0]}", (("system", system), ("user", question)),
                              "" if n == 1 else "the date and the user's name changed"))
    return _trap_or_fix("date", fixed, tuple(prompts),
                        trap=("Date and user name on the first line",
                              "The very first line changes every day and for every user, so no block ever matches."),
                        fix=("Date and user name moved to the end",
                             "The same instructions now come first, so they are reused; only the last line differs."))


def _tools_text(names: list[str]) -> str:
    lines = [json.dumps({"name": n, **TOOLS[n]}) for n in names]
    return "Tools you may call:\n" + "\n".join(lines)


def _tools(fixed: bool) -> Scenario:
    # The app collects tools from plugins; the order they register in differs between two requests.
    orders = [["weather_forecast", "bed_schedule", "tank_level", "seedling_stock"],
              ["tank_level", "weather_forecast", "seedling_stock", "bed_schedule"]]
    systems = [f"{_tools_text(sorted(o) if fixed else o)}\n\n{INSTRUCTIONS}" for o in orders]  # tools first, as APIs do
    note = "the same tools, sorted by name again" if fixed else "the same tools, listed in another order"
    return _trap_or_fix("tools", fixed, _two_requests(systems, note),
                        trap=("Tools listed in a different order", "Same tools, different order: the text differs "
                              "from the first tool on, so everything after misses."),
                        fix=("Tools sorted by name",
                             "Sorting the tools gives the same text every time, so the whole tool list is reused."))


def _json_keys(fixed: bool) -> Scenario:
    # Two code paths build the same member record with the keys inserted in a different order.
    records = [dict(MEMBER_FIELDS), dict(reversed(MEMBER_FIELDS))]
    systems = [f"Member record: {json.dumps(r, sort_keys=fixed)}\n\n{INSTRUCTIONS}" for r in records]
    note = "the same record, keys sorted" if fixed else "the same record, keys in another order"
    return _trap_or_fix("json", fixed, _two_requests(systems, note),
                        trap=("JSON keys in a different order", "Same data, keys in another order: different text, "
                              "so different tokens from the first key on."),
                        fix=("JSON serialised with sorted keys",
                             "json.dumps(record, sort_keys=True) writes identical text for identical data."))


def _history(fixed: bool) -> Scenario:
    first = (("system", INSTRUCTIONS), ("user", QUESTION_1), ("assistant", ANSWER_1), ("user", QUESTION_2))
    if fixed:
        later = first + (("assistant", ANSWER_2), ("user", QUESTION_3))
        note = "the earlier turns are resent word for word, the new ones appended"
    else:
        summary = "Summary of the conversation so far: the member asked about yellow spots (early blight) and watering."
        later = (("system", INSTRUCTIONS + "\n" + summary), ("user", QUESTION_3))
        note = "the earlier turns were replaced by a summary"
    return _trap_or_fix("history", fixed, (Prompt("Request 1", first), Prompt("Request 2", later, note)),
                        trap=("History summarised", "Rewriting earlier turns changes the prompt right after the "
                              "instructions: the rest misses."),
                        fix=("History kept word for word",
                             "Appending to the history never changes what was already sent, so all of it is reused."))


def _template(fixed: bool) -> Scenario:
    messages = [(("system", INSTRUCTIONS), ("user", QUESTION_1)), (("system", INSTRUCTIONS), ("user", QUESTION_2))]
    second_template = None if fixed else NEW_TEMPLATE
    prompts = (Prompt("Request 1", messages[0]),
               Prompt("Request 2", messages[1], "the same template as before" if fixed
                      else "an app update changed the chat template (a blank line after each role)", second_template))
    return _trap_or_fix("template", fixed, prompts,
                        trap=("Template changed",
                              "The template wraps every message, so a change in it alters the very first tokens."),
                        fix=("Template pinned",
                             "Pin the template version; change it between sessions, not in the middle of one."))


def scenarios() -> dict[str, Scenario]:
    out = [_conversation()]
    for build in (_date_first, _tools, _json_keys, _history, _template):
        out += [build(False), build(True)]
    return {s.key: s for s in out}


TRAPS = [("date", "Date / user on line 1"), ("tools", "Tool order"), ("json", "JSON key order"),
         ("history", "History summarised"), ("template", "Template change")]


# ---- tokenizing and playing ------------------------------------------------------------------
def prompt_tokens(lm, prompt: Prompt) -> tuple[list[int], list[str], list[str]]:
    """(ids, readable token texts, roles) exactly as the app tokenizes a request."""
    request = ChatRequest(prompt.messages).validate()
    ids, roles = tokenize_segments(lm.tokenizer, segments(lm.tokenizer, request, prompt.template), safe=True)
    return ids, [t.text for t in describe_tokens(lm.tokenizer, ids, roles)], roles


def token_text(lm, token_id: int | None) -> str:
    if token_id is None:
        return ""
    return render_bytes(piece_bytes(lm.tokenizer.convert_ids_to_tokens([token_id])[0]))


def explain(stats: dict, cached_text: str, new_text: str) -> str:
    """The reason for the row of blocks, in words."""
    bs, d = stats["block_size"], stats["divergence"]
    tail = stats["n_tokens"] % bs
    partial = f" The last {tail} tokens fill only part of a block: they are always computed and never stored." \
        if tail else ""
    if d is None:
        again = (" The last block was cached too, but it is run again: the model has to process the last prompt "
                 "token to score the next one.") if stats.get("blocks_recomputed") else ""
        return f"Every full block was already cached: {stats['tokens_reused']} tokens reused.{again}{partial}"
    i = d["token_index"]
    if d["kind"] == "cache ends" and i == 0:
        return f"Nothing in the cache starts like this prompt: all of it is computed, and its full blocks are kept.{partial}"
    if d["kind"] == "cache ends":
        return (f"The cache holds nothing past token {i} on this path: the earlier request ended there, or its last "
                f"tokens formed a partial block, which is never stored. From token {i} on, everything is computed."
                f"{partial}")
    return (f"Token {i} differs: the cached prompt had '{cached_text}', this one has '{new_text}'. "
            f"From there on every block is computed: a block's key covers all the tokens before it, so nothing "
            f"after a difference can match, even identical text.{partial}")


def cold_ttft(lm, ids: list[int], block_size: int) -> float:
    """The same request with nothing reused and nothing kept."""
    return PrefixCache(PrefixCacheConfig(block_size=block_size)).serve(lm, ids, reuse=False, store=False).stats.ttft_s


def play(lm, scenario: Scenario, block_size: int = 16, measure_cold: bool = True,
         cache: PrefixCache | None = None) -> list[dict]:
    """Serve each request in order through one cache. Plain records (no tensors), one per request."""
    cache = cache or PrefixCache(PrefixCacheConfig(block_size=block_size))
    if measure_cold:  # one short warm-up pass, so the first timed request does not pay for it
        PrefixCache().serve(lm, prompt_tokens(lm, scenario.prompts[0])[0][:8], reuse=False, store=False)
    rows = []
    for prompt in scenario.prompts:
        rows.append(serve_prompt(lm, cache, prompt, measure_cold))
    return rows


def serve_prompt(lm, cache: PrefixCache, prompt: Prompt, measure_cold: bool = True) -> dict:
    ids, texts, roles = prompt_tokens(lm, prompt)
    stats = cache.serve(lm, ids).stats.to_dict()
    d = stats["divergence"] or {}
    cached_text, new_text = token_text(lm, d.get("cached_token_id")), token_text(lm, d.get("new_token_id"))
    return {
        "label": prompt.label, "note": prompt.note, "ids": ids, "tokens": texts, "roles": roles,
        "stats": stats, "reason": explain(stats, cached_text, new_text),
        "cached_token": cached_text, "new_token": new_text,
        "ttft_cold_s": cold_ttft(lm, ids, cache.config.block_size) if measure_cold else None,
        "session_hit_rate": cache.token_hit_rate, "bytes_held": cache.bytes_held,
        "formula_bytes": cache.formula_bytes(lm),
    }


def parse_messages(text: str) -> tuple[tuple[str, str], ...]:
    """'system: a\\nmore\\nuser: b' -> (('system', 'a\\nmore'), ('user', 'b')).

    A line starting with `system:`, `user:` or `assistant:` opens a message; other lines continue it.
    """
    messages: list[list[str]] = []
    for line in text.splitlines():
        role, sep, rest = line.partition(":")
        if sep and role.strip().lower() in ("system", "user", "assistant"):
            messages.append([role.strip().lower(), rest.strip()])
        elif messages:
            messages[-1][1] += "\n" + line
        elif line.strip():
            messages.append(["user", line])
    return tuple((r, c.strip()) for r, c in messages)


def compare_texts(lm, text_a: str, text_b: str, block_size: int = 16, measure_cold: bool = True) -> list[dict]:
    """Request A then request B through a fresh cache (raises InputError if either is invalid)."""
    prompts = (Prompt("Request A", parse_messages(text_a)), Prompt("Request B", parse_messages(text_b), "after A"))
    return play(lm, Scenario("compare", "Your two requests", "conversation", "", prompts), block_size, measure_cold)


# ---- command line ----------------------------------------------------------------------------
def add_cache_demo_parser(subparsers) -> None:
    p = subparsers.add_parser("cache-demo", help="play the prompt-caching scenarios and print cache hits")
    p.add_argument("--scenario", action="append", default=[],
                   help=f"scenario key (repeatable; default: all): {', '.join(scenarios())}")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--no-cold", action="store_true", help="skip the cold re-run of each request")
    p.set_defaults(func=cmd_cache_demo)


def cmd_cache_demo(args) -> int:
    from .loader import shared_model

    lm = shared_model()
    known = scenarios()
    keys = args.scenario or list(known)
    unknown = [k for k in keys if k not in known]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}; choose from {', '.join(known)}")
        return 2
    for key in keys:
        s = known[key]
        print(f"\n== {s.title} [{s.kind}] ==\n   {s.lesson}")
        print(f"   {'request':28s} {'tokens':>6s} {'hit':>4s} {'miss':>4s} {'part':>4s} {'reused':>6s} "
              f"{'TTFT ms':>8s} {'cold ms':>8s}")
        for row in play(lm, s, args.block_size, measure_cold=not args.no_cold):
            st = row["stats"]
            cold = f"{row['ttft_cold_s'] * 1e3:8.1f}" if row["ttft_cold_s"] is not None else f"{'-':>8s}"
            print(f"   {row['label'][:28]:28s} {st['n_tokens']:6d} {st['blocks_hit']:4d} {st['blocks_missed']:4d} "
                  f"{st['blocks_not_cacheable']:4d} {st['tokens_reused']:6d} {st['ttft_s'] * 1e3:8.1f} {cold}")
            print(f"      {row['reason']}")
    return 0


# ---- HTML views (no streamlit here; every token string goes through html_text) -----------------
STATUS_STYLE = {  # background, border
    HIT: ("#bbf7d0", "2px solid #16a34a"),
    MISS: ("#fed7aa", "2px solid #ea580c"),
    RECOMPUTED: ("#dcfce7", "2px dashed #16a34a"),
    NOT_CACHEABLE: ("#e5e7eb", "2px dashed #6b7280"),
}
DIVERGENT_STYLE = "box-shadow:0 0 0 3px #dc2626;"


def block_legend() -> str:
    labels = {HIT: "hit: K/V read from the cache", MISS: "miss: computed, then stored",
              RECOMPUTED: "cached, but run again: the last prompt token must go through the model",
              NOT_CACHEABLE: "not cacheable: partial block, computed, never stored"}
    return "<div style='margin:4px 0 8px 0'>" + "".join(
        f"<span style='display:inline-block;background:{STATUS_STYLE[s][0]};border:{STATUS_STYLE[s][1]};"
        f"border-radius:5px;padding:1px 8px;margin-right:8px;font-size:0.85em;color:#111'>{html_text(t)}</span>"
        for s, t in labels.items()) + (f"<span style='display:inline-block;border-radius:5px;padding:1px 8px;"
                                       f"font-size:0.85em;{DIVERGENT_STYLE}color:#111'>first divergent token</span>"
                                       "</div>")


def shows_divergence(d: dict | None) -> bool:
    """Worth marking: a changed token, or a cached path that ends after some hits (not an empty cache)."""
    return d is not None and (d["kind"] == "changed" or d["token_index"] > 0)


def block_row_html(row: dict) -> str:
    """One box per block, coloured by status; the text inside is the block's tokens (hover for all)."""
    stats, tokens = row["stats"], row["tokens"]
    bs = stats["block_size"]
    d = stats["divergence"]
    marked = d["token_index"] // bs if shows_divergence(d) else -1
    boxes = []
    for b, status in enumerate(stats["block_status"]):
        bg, border = STATUS_STYLE[status]
        text = "".join(tokens[b * bs:(b + 1) * bs])
        span = f"tokens {b * bs}–{min((b + 1) * bs, len(tokens)) - 1}"
        mark = DIVERGENT_STYLE if b == marked else ""
        flag = f" ▼{d['token_index']}" if b == marked else ""
        boxes.append(
            f"<div title='{html_text(f'block {b} ({span}), {status}: {text}')}' style='width:92px;height:46px;"
            f"background:{bg};border:{border};{mark}border-radius:6px;padding:2px 4px;overflow:hidden;color:#111'>"
            f"<div style='font-size:0.7em;font-weight:600'>#{b} {html_text(status)}{html_text(flag)}</div>"
            f"<div style='font-family:monospace;font-size:0.62em;white-space:nowrap;overflow:hidden;"
            f"text-overflow:ellipsis'>{html_text(text)}</div></div>")
    return "<div style='display:flex;flex-wrap:wrap;gap:5px;margin:4px 0'>" + "".join(boxes) + "</div>"


def divergence_html(row: dict, around: int = 8) -> str:
    """The tokens around the first divergent token, that token boxed in red with the cached one beside it."""
    d = row["stats"]["divergence"]
    if not shows_divergence(d):
        return ""
    i, tokens = d["token_index"], row["tokens"]
    parts = []
    for j in range(max(0, i - around), min(len(tokens), i + around)):
        style = ("background:#fee2e2;border:2px solid #dc2626;font-weight:600;" if j == i
                 else "background:#f1f5f9;border:1px solid #cbd5e1;")
        parts.append(f"<span title='token {j}' style='display:inline-block;{style}border-radius:4px;padding:0 4px;"
                     f"margin:1px;font-family:monospace;font-size:0.85em;color:#111;white-space:pre'>"
                     f"{html_text(tokens[j])}</span>")
    cached = (f" <span style='font-size:0.85em;color:#991b1b'>cached here: "
              f"<code>{html_text(row['cached_token'])}</code></span>" if row["cached_token"] else "")
    return f"<div style='margin:2px 0 6px 0'>token {i}: {''.join(parts)}{cached}</div>"
