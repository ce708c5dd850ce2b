"""The What if page in AppTest, on the tiny random-weight model (fixture `tiny_app`, fast tier)."""
import re

import pytest
from kit.texts import KOREAN



def test_what_if_page_shows_the_branch_it_just_made(tiny_app):
    """Continue makes a branch and shows it (the tree's radio once kept 'the original run' selected
    and sent the page straight back to it)."""
    from kit.apptest import page_app

    at = page_app("what_if", req_max_new_tokens=8)
    at.run()
    at.text_input(key="br_typed").input("$*x*$").run()  # a forced token's text is Markdown-escaped where named
    at.button(key="br_go").click().run()
    assert not at.exception
    assert any("this branch" in m.value and "per token" in m.value for m in at.markdown)
    assert at.radio(key="br_tree").value == 1
    named = [c.value for c in at.caption if c.value.startswith("Branching from")]
    assert named and "\\$" in named[0] and "'$" not in named[0], named
    assert all("'$" not in o for o in at.radio(key="br_tree").options)


@pytest.mark.app
def test_what_if_names_answer_tokens_by_their_character():
    """Step 5 sits inside 토: the answer so far and the candidates are named as Journey names them,
    never as bare bytes ('answer so far: …<0xED><0x86>', '<0xA0> (id 117)')."""
    from kit.apptest import page_app

    at = page_app("what_if", req_question=KOREAN, req_max_new_tokens=8, br_step=5)
    at.run()
    assert not at.exception, at.exception
    so_far = at.code[0].value
    assert "토 (1–2/3)" in so_far and "<0xED><0x86>" not in so_far, so_far
    assert "토 (3/3)" in so_far  # the run's own choice at step 5 completes it
    options = at.selectbox(key="br_pick").options
    bare = [o for o in options if o.startswith("<0x") and not any(w in o for w in ("→", "byte", "continues"))]
    assert not bare, bare
    at.text_input(key="br_typed").input("토마토").run()  # a typed token is named the same way
    typed = [c.value for c in at.caption if "starts with token" in c.value]
    assert typed and not re.search(r"token `+ <0x[0-9A-F]{2}> `+", typed[0]), typed
    at.button(key="br_go").click().run()
    assert not at.exception, at.exception
    sides = [m.value for m in at.markdown if "per token" in m.value]
    assert len(sides) == 2 and all("from step 5 on" in m for m in sides)
