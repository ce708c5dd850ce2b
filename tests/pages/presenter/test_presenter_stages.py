"""Presenter mode's stages (views/pages/presenter/stages.py): each title has its screen; the poll kind each screen
offers first is named by the stage's own title, and the room's polls and the lesson files share one list of kinds
(pipeline/core/poll_kinds.py); a lesson's stage finds its screen by its page (and a section's switch)."""
from kit.apptest import presenter_at

from pipeline.core.poll_kinds import KINDS, kind_name, kind_title
from views.pages.presenter.stages import STAGE_KINDS, STAGES, poll_kind_at, screen_of, stage_number


def test_every_stage_draws_its_own_screen(tiny_app):
    """The page draws each screen by its title (and raises for a title it has no screen for)."""
    for n, (title, _) in enumerate(STAGES, 1):
        at = presenter_at(n)  # run without an exception
        assert at.title[0].value == f"{n}. {title}"


def test_each_stage_kind_is_keyed_by_a_stage_that_exists_and_is_a_kind():
    assert set(STAGE_KINDS) <= {title for title, _ in STAGES} and set(STAGE_KINDS.values()) <= set(KINDS)
    titles = ["The request", "Tokens", "Attention", "Logits: a score for every token", "Sampling",
              "Many answers at once", "The next request: prompt caching"]
    assert [poll_kind_at(stage_number(t)) for t in titles] == ["next_token", "tokens", "attention", "next_token",
                                                               "temperature", "temperature", "prompt_caching"]
    assert stage_number("The next request: prompt caching") == len(STAGES)


def test_a_lesson_reaches_a_sections_screen_only_by_its_switch():
    """Generation's page has three screens; "Many answers at once" shows its Branch section: a lesson stage of that
    page goes there when its controls turn the section on, else to the page's first other screen."""
    generation = "views/pages/generation/page.py"
    assert screen_of(generation, {}) == stage_number("Detokenize and stream")
    assert screen_of(generation, {"gen.branch_on": "0"}) == stage_number("Detokenize and stream")
    assert screen_of(generation, {"gen.branch_on": "1"}) == stage_number("Many answers at once")
    assert screen_of("views/pages/tokens.py", {"gen.branch_on": "1"}) == stage_number("Tokens")
    assert screen_of("views/pages/what_if.py", {}) is None


def test_a_kind_has_one_name_and_one_title():
    assert kind_name("tokens") == "Tokens" and kind_title("tokens") == "Tokens: how many?"
