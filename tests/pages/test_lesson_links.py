"""Every shipped lesson's stage opens its page with its controls accepted (tiny model, fast tier): the lesson check
knows a control's name only by its form (`nt.top_k`); the page's own parser reads its value, and a value it refused
would be said beside the control ("The link's `nt.draws` was not usable")."""
import os
from pathlib import Path

import pytest
from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

from pipeline.lessons.lesson import read_lesson
from views.chrome.page_list import page_at

STAGES = [(path.name, n, stage) for path in sorted((Path(ROOT) / "lessons").glob("*.toml"))
          for n, stage in enumerate(read_lesson(path).stages, 1) if stage.controls]


@pytest.mark.parametrize("stage", [s for _, _, s in STAGES], ids=[f"{name}-{n}" for name, n, _ in STAGES])
def test_a_stages_controls_are_accepted_by_its_page(tiny_app, stage):
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = {**stage.query(), "max_new_tokens": "2"}
    at.run()  # Start: the link's page controls wait in the address for their page
    at.switch_page(page_at(stage.page).script).run()
    assert not at.exception, at.exception
    refused = [w.value for w in at.warning if "was not usable" in w.value]
    assert not refused, refused
    for name, text in stage.controls.items():  # each applied to its widget's key: `nt.draws` -> nt_draws
        value = at.session_state[name.replace(".", "_", 1)]
        as_linked = ("1" if value else "0") if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) \
            else str(value)  # as the link writes it (views/links/params.py): a switch 1 or 0, a float as %g
        assert as_linked == text, (name, value)
