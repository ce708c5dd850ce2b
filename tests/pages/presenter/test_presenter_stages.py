"""Presenter mode's stages (views/pages/presenter/stages.py): the poll kind each screen offers first is named by the
stage's own title, and the room's polls and the lesson files share one list of kinds (pipeline/core/poll_kinds.py)."""
from pipeline.core.poll_kinds import KINDS, kind_name, kind_title
from views.pages.presenter.stages import STAGE_KINDS, STAGES, poll_kind_at


def test_each_stage_kind_is_keyed_by_a_stage_that_exists_and_is_a_kind():
    assert set(STAGE_KINDS) <= {title for title, _ in STAGES} and set(STAGE_KINDS.values()) <= set(KINDS)
    assert [poll_kind_at(n) for n in (1, 3, 7, 8, 9, 13)] == ["next_token", "tokens", "attention", "next_token",
                                                               "temperature", "prompt_caching"]


def test_a_kind_has_one_name_and_one_title():
    assert kind_name("tokens") == "Tokens" and kind_title("tokens") == "Tokens: how many?"
