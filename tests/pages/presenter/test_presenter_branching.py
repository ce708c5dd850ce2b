"""Presenter mode's "Many answers at once" (views/pages/presenter/stages.py): the room's request answered by the
samples its stage's Branch controls ask for (views/request/samples.py's room_plan; ROOM_CONTROLS where no lesson stage
sets others) in one batch, side by side (Generation's samples_side_by_side), each sample the answer a single run with
its seed and temperature gives; a learner following the room sees the same samples, drawn again from the same seeds.
A lesson's stage sets them, and its start-up queues the same draw. AppTest on the tiny models (fast tier)."""
import re

import pytest
from kit.apptest import html_blocks, lesson_presenter, presenter_at, presenting_at

from pipeline.run.trace import run_trace
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.text.pieces import token_pieces
from ui.escape import html_text
from views.pages.presenter.stages import stage_number
from views.request.samples import room_plan

pytestmark = pytest.mark.usefixtures("lessons_reported")  # kit.app_fixtures

QUESTION = "Is a peanut a nut?"  # not the default question: a learner's fresh session must take the room's
STAGE = stage_number("Many answers at once")
ROOM = room_plan({})  # sample 0 greedy, three at T = 1, seeds 0 to 3
ROOM_TEMPERATURES, ROOM_SEED = ROOM.temperatures, ROOM.seed


def table(at) -> str:
    tables = [b for b in html_blocks(at) if "divergence (bits)" in b]
    assert len(tables) == 1, len(tables)
    return tables[0]


def columns(html: str, n: int) -> list[list[str]]:
    """Each sample's cells, top to bottom, as drawn (escaped; '·' once the sample has ended)."""
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in html.split("<tr")[2:]]  # after the table and header
    return [[row[1 + i] for row in rows] for i in range(n)]


def single(lm, model: str | None, temperature: float, seed: int) -> list[int]:
    options = GenerationOptions(max_new_tokens=4, temperature=temperature, seed=seed)
    request = ChatRequest.from_question(QUESTION, options=options)
    return run_trace(request, lm).generated_token_ids


@pytest.mark.parametrize("model", [None, "gemma-3-270m"])
def test_the_stage_draws_the_rooms_samples_and_a_follower_sees_the_same(tiny_app, request, model):
    if model is not None and request.getfixturevalue("tiny_app_gemma") is None:
        pytest.skip("no tiny Gemma in this test run")
    check_the_stage(model)


@pytest.mark.app
@pytest.mark.parametrize("model", [None, "gemma-3-270m"])
def test_the_stage_on_the_real_models(model):
    check_the_stage(model)


def check_the_stage(model: str | None) -> None:
    """The presenter's screen: each sample its single run on the model the app uses; a follower's the same."""
    from pipeline.model.loader import shared_model
    from views.server.state import result_store

    lm = shared_model(model)  # the model the app uses for it (a tiny one in the fast tier)
    state = {"req_question": QUESTION, **({"req_model": model} if model else {})}
    at = presenting_at(STAGE, **state)
    assert at.title[0].value == f"{STAGE}. Many answers at once"
    assert ROOM_TEMPERATURES == (0.0, 1.0, 1.0, 1.0) and ROOM_SEED == 0  # the room's documented default
    assert "sample 0 greedy (T = 0, seed 0), samples 1 to 3 at T = 1 (seeds 1 to 3)" in " ".join(
        m.value for m in at.markdown)
    drawn = table(at)
    n = len(ROOM_TEMPERATURES)
    for i, t in enumerate(ROOM_TEMPERATURES):
        assert f"seed {ROOM_SEED + i} · T {t:g}" in drawn
    wanted = [single(lm, model, t, ROOM_SEED + i) for i, t in enumerate(ROOM_TEMPERATURES)]
    cells = columns(drawn, n)
    assert len(cells[0]) == max(map(len, wanted))  # one row per position
    for ids, column in zip(wanted, cells):  # each sample is its single run: same seed, same tokens
        labels = [f"<code>{html_text(q.label)}</code>" for q in token_pieces(lm.tokenizer, ids)]
        assert column == labels + ["·"] * (len(column) - len(labels))
    assert drawn.count("◆") == sum(len({w[j] for w in wanted if j < len(w)}) > 1 for j in range(len(cells[0])))
    assert "font-size:1.3em" in drawn  # projector-sized, not the Generation page's 0.85em
    assert not [b for b in at.get("selectbox") if b.key and b.key.startswith("gen_branch")]  # no token picker

    room = at.session_state["pr_room"]
    assert len(result_store()) > 0  # the samples the presenter drew, kept for the server
    result_store().clear()  # the learner's screen draws the samples again, from the same seeds
    learner = presenter_at(1, pr_follow=room)  # a fresh session: the default request, stage 1
    assert learner.title[0].value == f"{STAGE}. Many answers at once"
    assert learner.session_state["req_question"] == QUESTION
    assert table(learner) == drawn


def test_a_stages_controls_are_read_with_the_branch_sections_checks():
    """sample_plan: N, the base seed and each sample's temperature from the Branch section's link controls, the
    section's defaults where absent; a bad value is named in a note and its default used, never raised."""
    from views.request.samples import ROOM_CONTROLS, sample_plan

    plan = sample_plan({"gen.branch_n": "3", "gen.branch_seed": "5", "gen.branch_t0": "0.7", "gen.branch_t1": "1.5",
                        "gen.branch_t2": "0", "gen.branch_t5": "2"})  # t5: past N, not read
    assert (plan.temperatures, plan.seed, plan.notes) == ((0.7, 1.5, 0.0), 5, ())
    assert plan.describe() == ("sample 0 at T = 0.7 (seed 5), sample 1 at T = 1.5 (seed 6), "
                               "sample 2 greedy (T = 0, seed 7)")
    assert sample_plan({}).temperatures == (1.0,) * 4 and sample_plan({}).seed == 0  # Generation's defaults
    assert room_plan({"gen.branch_on": "1", "nt.top_k": "8"}) == sample_plan(ROOM_CONTROLS) == ROOM
    assert room_plan({"gen.branch_n": "2"}).temperatures == (0.0, 1.0)  # the room's sample 0 stays greedy
    bad = sample_plan({"gen.branch_n": "9", "gen.branch_seed": "-1", "gen.branch_t0": "abc", "gen.branch_t1": "nan",
                       "gen.branch_t2": "2.5", "gen.branch_t3": "9" * 5000})
    assert (bad.temperatures, bad.seed) == ((1.0,) * 4, 0)
    assert [note.split(":")[0] for note in bad.notes] == ["gen.branch_n", "gen.branch_seed"] + [
        f"gen.branch_t{i}" for i in range(4)]
    assert bad.notes[0] == "gen.branch_n: '9' must be a whole number from 2 to 8; the default 4 is used instead."
    assert all(len(note) < 300 for note in bad.notes)  # a long value is quoted in part


BRANCH_LESSON = """title = "Branching"

[[stages]]
title = "Three answers"
page = "generation"
[stages.request]
q = "Is a peanut a nut?"
max_new_tokens = 4
[stages.controls]
"gen.branch_on" = true
"""
CONTROLS = """"gen.branch_n" = 3
"gen.branch_seed" = 5
"gen.branch_t0" = 0.7
"gen.branch_t1" = 1.5
"gen.branch_t2" = 0
"""


def branching_presenter(tmp_path, monkeypatch, text: str, first_screen: int = STAGE):
    """The presenter's first screen (`first_screen`) on a server started with this lesson (kit.apptest)."""
    at, path = lesson_presenter(tmp_path, monkeypatch, text)
    assert at.title[0].value.startswith(f"{first_screen}. ")
    return at, path


def test_a_lesson_stages_samples_are_the_ones_the_screen_draws_and_its_learners_see(tiny_app, tmp_path, monkeypatch):
    """A lesson stage with N = 3, its temperatures and a seed: the presenter's screen draws those 3 samples (each its
    single run), says so, stores them under the key the lesson's start-up queues, and a follower sees the same."""
    from pipeline.lessons.lesson import read_lesson
    from views.request.samples import samples_key
    from views.server.lesson_runs import stage_request, start_lesson_runs
    from views.server.state import default_model_key, result_store, using_model
    from views.server.waiting import model_result_key

    result_store().clear()
    at, path = branching_presenter(tmp_path, monkeypatch, BRANCH_LESSON + CONTROLS)
    drawn = table(at)
    wanted_t, wanted_seeds = (0.7, 1.5, 0.0), (5, 6, 7)
    assert drawn.count("<th>sample ") == 3
    for t, seed in zip(wanted_t, wanted_seeds):
        assert f"seed {seed} · T {t:g}" in drawn
    text = " ".join(m.value for m in at.markdown)
    assert ("**3 times at once**, in one batch: sample 0 at T = 0.7 (seed 5), sample 1 at T = 1.5 (seed 6), "
            "sample 2 greedy (T = 0, seed 7)") in text
    lm = tiny_app
    cells = columns(drawn, 3)
    for t, seed, column in zip(wanted_t, wanted_seeds, cells):
        labels = [f"<code>{html_text(q.label)}</code>" for q in token_pieces(lm.tokenizer, single(lm, None, t, seed))]
        assert column == labels + ["·"] * (len(column) - len(labels))

    drawn_keys = [k for k, _ in result_store().items() if k[2:3] == ("samples",)]
    assert len(drawn_keys) == 1, drawn_keys  # the screen's draw is the one the lesson queued at start: no other
    again = start_lesson_runs(str(path))  # the lesson's start-up, once more: it finds its samples stored
    (stage,) = again.stages
    assert stage.samples_ticket is None
    with using_model(default_model_key(), "fp32"):
        assert [model_result_key(stage.samples_key)] == drawn_keys
        assert stage.samples_key == samples_key(stage_request(read_lesson(str(path)).stages[0]), wanted_t, 5)

    at.button(key="pr_start").click().run()
    assert not at.exception, at.exception
    learner = presenter_at(1, pr_follow=at.session_state["pr_room"])  # the room carries the stage's controls
    assert learner.title[0].value == f"{STAGE}. Many answers at once"
    assert table(learner) == table(at)
    assert [k for k, _ in result_store().items() if k[2:3] == ("samples",)] == drawn_keys


def test_a_lesson_stages_bad_controls_are_named_and_the_defaults_drawn(tiny_app, tmp_path, monkeypatch, capfd):
    """On the presenter's screen (a note each) and on the terminal when the lesson's runs are queued at start."""
    bad = '"gen.branch_n" = 9\n"gen.branch_t0" = 3\n"gen.branch_seed" = "seven"\n'
    at, _ = branching_presenter(tmp_path, monkeypatch, BRANCH_LESSON + bad)
    assert ("lesson: stage 1 'Three answers': gen.branch_n: '9' must be a whole number from 2 to 8; the default 4 "
            "is used instead.") in capfd.readouterr().out
    warnings = " ".join(w.value for w in at.warning)
    for name in ("gen.branch_n", "gen.branch_t0", "gen.branch_seed"):
        assert name.replace("_", "\\_") in warnings or name in warnings, warnings
    assert "must be a whole number from 2 to 8" in warnings
    drawn = table(at)
    assert drawn.count("<th>sample ") == 4 and "seed 0 · T 1" in drawn  # the defaults: 4 samples, seed 0, T = 1


TOKENS_FIRST = """[[stages]]
title = "Tokens first"
page = "tokens"

"""
TWO_STAGES = BRANCH_LESSON.replace("[[stages]]\n", TOKENS_FIRST + "[[stages]]\n", 1) + CONTROLS


def test_a_presenter_taking_the_room_up_again_mid_lesson_keeps_the_stages_samples(tiny_app, tmp_path, monkeypatch):
    """The lesson's second stage ("Many answers at once" with N = 3) shown and the room started, then the presenter's
    private link opened again (a reload, another machine): the screen is that lesson stage's, with its 3 samples.
    Before, taking a room up again set the lesson back to its first stage, and the screen drew the room's defaults."""
    at, _ = branching_presenter(tmp_path, monkeypatch, TWO_STAGES, first_screen=stage_number("Tokens"))
    at.button(key="pr_start").click().run()  # the lesson's panel is the presenter's of a room
    at.button(key="ls_next").click().run()
    assert not at.exception, at.exception
    assert at.title[0].value == f"{STAGE}. Many answers at once"
    assert table(at).count("<th>sample ") == 3
    code, key = at.session_state["pr_room"], at.session_state["pr_key"]
    again = presenter_at(STAGE, pr_room=code, pr_key=key, req_question=QUESTION)  # the private link, a new session
    assert again.title[0].value == f"{STAGE}. Many answers at once"
    assert again.session_state["ls_stage"] == 1
    assert table(again) == table(at)
