"""'My session' as one HTML file (ui/session_summary.py): the visits in order with their links, answers and charts,
the notes beside their views, the poll answers' place; every learner's and model's text escaped (fast tier)."""
from ui.session_summary import session_summary_html

VISITS = [
    {"title": "Tokens", "link": "http://localhost:8501/tokens?q=Hi", "question": "Hi <b>there</b>",
     "model": "SmolLM2-135M-Instruct", "answer": "Hello!", "top": [["Hello", 0.6], ["<script>", 0.3]]},
    {"title": "Next token", "link": "http://localhost:8501/next-token?q=Hi", "question": "Hi", "model": "m",
     "answer": "", "top": []},
]


def test_visits_in_order_with_links_notes_and_charts():
    notes = {"http://localhost:8501/next-token?q=Hi": "softmax </div><script>alert(1)</script>"}
    html = session_summary_html(VISITS, notes, [], made_at="2026-12-06 14:00")
    assert html.index(">Tokens</a>") < html.index(">Next token</a>")
    assert "href='http://localhost:8501/tokens?q=Hi'" in html
    assert "Hi &lt;b&gt;there&lt;/b&gt;" in html
    assert "softmax &lt;/div&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert" not in html and "(empty answer)" in html
    assert html.count("class=\"plotly-graph-div\"") == 1  # one chart: the visit with candidates
    assert '"(1) &lt;script&gt;"' in html  # a token's text as a plotly label: shown, never read as markup
    assert "No poll answers in this session." in html
    assert "2 views visited, 1 notes" in html


def test_poll_answers_fill_their_table_and_a_bad_link_is_not_a_link():
    answers = [{"question": "How many tokens?", "yours": "7", "class": "5-9", "real": "8"}]
    html = session_summary_html([{"title": "X", "link": "javascript:alert(1)"}], {}, answers)
    assert "<td>How many tokens?</td><td>7</td><td>5-9</td><td>8</td>" in html
    assert "javascript:" not in html and "No notes." in html
