"""Prompt caching (the scenarios): a conversation, the classic traps, and each trap fixed.

Every scenario is a list of stateless requests played in order through one fresh PrefixCache.
The rule behind all the fixes: stable content first, variable content last, and the same bytes
for the same content every time (fixed order, fixed serialisation, fixed template).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

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
