"""Presenter mode's "Many answers at once" (views/pages/presenter/stages.py): the room's request answered by
ROOM_TEMPERATURES' samples in one batch, side by side (Generation's samples_side_by_side), each sample the answer a
single run with its seed and temperature gives; a learner following the room sees the same samples, drawn again
from the same seeds. AppTest on the tiny models, both layouts (fast tier)."""
import re

import pytest
from kit.apptest import html_blocks, presenter_at, presenting_at

from pipeline.run.trace import run_trace
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.text.pieces import token_pieces
from ui.escape import html_text
from views.pages.presenter.stages import stage_number
from views.request.samples import ROOM_SEED, ROOM_TEMPERATURES

QUESTION = "Is a peanut a nut?"  # not the default question: a learner's fresh session must take the room's
STAGE = stage_number("Many answers at once")


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
