"""A lesson file read and checked (pipeline.lessons): its stages in order with their requests as links write them,
and every refusal naming the file's line and the field (fast tier, no model)."""
from __future__ import annotations

import pytest

from pipeline.core.poll_kinds import KINDS
from pipeline.lessons.fields import PAGE_URLS, REQUEST_CHECKS
from pipeline.lessons.lesson import LessonError, parse_lesson, read_lesson
from pipeline.lessons.lines import line_of

GOOD = """title = "Two stages"
minutes = 10

[[stages]]
title = "Tokens"
page = "tokens"
[stages.request]
q = "Are tomatoes fruit?"
temperature = 0.7
[stages.controls]
"tok.text" = "berries"
"pd.sizes" = [1, 4, 16]

[[stages]]
title = "Next token"
page = "next-token"
poll = {kind = "next_token", question = "What comes first?"}
[stages.request]
max_new_tokens = 8
"""


def test_a_good_lesson_reads_in_order_with_link_text():
    lesson = parse_lesson(GOOD)
    assert lesson.title == "Two stages" and lesson.minutes == 10
    assert [s.page for s in lesson.stages] == ["tokens", "next-token"]
    first, second = lesson.stages
    assert first.query() == {"q": "Are tomatoes fruit?", "temperature": "0.7", "tok.text": "berries",
                             "pd.sizes": "1,4,16"}
    assert first.poll is None and second.poll.kind == "next_token" and second.poll.question == "What comes first?"
    assert second.request == {"max_new_tokens": "8"}


def refusal(text: str) -> LessonError:
    with pytest.raises(LessonError) as e:
        parse_lesson(text, "bad.toml")
    return e.value


@pytest.mark.parametrize("old, new, line, field", [
    ("temperature = 0.7", "temperature = 5", 9, "stages[0].request.temperature"),
    ('page = "next-token"', 'page = "nowhere"', 16, "stages[1].page"),
    ('kind = "next_token"', 'kind = "guess"', 17, "stages[1].poll.kind"),
    ("max_new_tokens = 8", "max_new_tokenz = 8", 19, "stages[1].request.max_new_tokenz"),
    ('q = "Are tomatoes fruit?"', "q = 3", 8, "stages[0].request.q"),
    ('"tok.text" = "berries"', 'room = "abcd"', 11, "stages[0].controls.room"),
    ('title = "Tokens"', 'titel = "Tokens"', 5, "stages[0].titel"),
    ("minutes = 10", "minutes = -1", 2, "minutes"),
    ("temperature = 0.7", 'temperature = "warm"', 9, "stages[0].request.temperature"),
])
def test_a_bad_field_is_named_with_its_line(old, new, line, field):
    assert old in GOOD
    e = refusal(GOOD.replace(old, new))
    assert (e.line, e.field) == (line, field)
    assert str(e).startswith(f"bad.toml, line {line}: {field}: ")


def test_missing_fields_and_broken_toml_are_said():
    assert refusal(GOOD.replace('title = "Tokens"\n', "")).field == "stages[0].title"
    e = refusal('title = "x"\n')
    assert e.field == "stages" and "at least one" in e.message
    e = refusal(GOOD.replace('page = "tokens"', 'page = "tokens'))
    assert (e.field, e.line) == ("toml", 6)


def test_line_of_finds_tables_inline_tables_and_keys():
    assert line_of(GOOD, key="minutes") == 2
    assert line_of(GOOD, stage=1) == 14
    assert line_of(GOOD, stage=1, table="poll", key="kind") == 17
    assert line_of(GOOD, stage=0, table="controls", key="tok.text") == 11
    assert line_of(GOOD, stage=0, table="request") == 7


def test_the_lists_match_the_apps_pages_and_links():
    """pipeline/ cannot import views/: its lists of pages and the request's link names are kept equal here."""
    from views.chrome.page_list import PAGES
    from views.links.url_state import REQUEST

    assert PAGE_URLS == tuple(p.url for p in PAGES)
    assert set(REQUEST_CHECKS) == set(REQUEST)
    assert KINDS == ("next_token", "tokens", "temperature", "attention", "prompt_caching")


def test_a_lesson_file_not_named_toml_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "first.json"
    path.write_text('{"title": "Two stages", "stages": []}', encoding="utf-8")
    with pytest.raises(LessonError) as e:
        read_lesson(path)
    assert str(path) in str(e.value) and "not a .toml file" in str(e.value) and "TOML" in str(e.value)
    good = tmp_path / "first.TOML"
    good.write_text(GOOD, encoding="utf-8")
    assert read_lesson(good).title
