"""A button's result stays on the page until its inputs change (views/kept_result.py), fast tier on the tiny model."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]


def ablation_lines(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if "probability of" in m.value and "→" in m.value]


def test_the_ablation_result_stays_when_integrated_gradients_is_pressed_and_goes_when_its_inputs_change(tiny_app):
    at = AppTest.from_file(str(ROOT / "views" / "why_token.py"), default_timeout=240)
    at.run()
    at.button(key="why_ablate").click().run()
    assert not at.exception, [e.message for e in at.exception]
    [before] = ablation_lines(at)
    at.button(key="why_ig").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("off by" in c.value for c in at.caption)  # integrated gradients drawn
    assert ablation_lines(at) == [before]  # and the ablation still there, the same
    at.radio(key="why_ab_mode").set_value("mean").run()  # an input of the ablation changes: its old result goes
    assert ablation_lines(at) == []
    assert any("off by" in c.value for c in at.caption)
