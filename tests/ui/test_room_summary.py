"""The room summary's HTML (ui/room_summary.py): self-contained (plotly.js inlined, no outside address), every
learner's answer escaped, one chart per poll."""
import re

from pipeline.server.polls.record import new_poll
from ui.report import plotly_js
from ui.room_summary import room_summary_html


def test_the_summary_is_one_offline_file_with_answers_as_text():
    real = {"top": [{"id": 7, "label": "␣Paris", "text": " Paris", "probability": 0.6}]}
    polls = [(new_poll("next_token", "What <i>next</i>?", {"q": "France?"}, real=real),
              ["<script>alert(1)</script>", "Paris"]),
             (new_poll("tokens", "How many?", {}, real={"count": 9, "answer": "9", "tokens": []}), ["7", "9"])]
    html = room_summary_html("abc234", polls, questions_asked=3)
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "What &lt;i&gt;next&lt;/i&gt;?" in html and "asked 3 questions" in html
    assert html.count('class="plotly-graph-div"') == 2
    assert plotly_js() in html  # inlined, once
    own = html.replace(plotly_js(), "")
    assert not re.findall(r"""(?:src|href)=["']?https?://""", own)  # nothing fetched from anywhere


def test_a_poll_is_said_revealed_only_when_reveal_froze_its_answers():
    """A Reveal cut short (the server killed in its wait) and the poll then closed: the class never saw it."""
    from dataclasses import replace

    opened = new_poll("tokens", "How many?", {}, real={"count": 9, "answer": "9", "tokens": []})
    cut_short = replace(opened, revealed_at=1.0, closed_at=2.0)
    revealed = replace(opened, revealed_at=1.0, revealed_answers=["7"], closed_at=2.0)
    notes = [re.findall(r"<p class='note'>([^<]*)</p>", room_summary_html("abc234", [(p, ["7"])], 0))[-1]
             for p in (opened, cut_short, revealed)]
    assert [n.endswith("never revealed") for n in notes] == [True, True, False], notes
