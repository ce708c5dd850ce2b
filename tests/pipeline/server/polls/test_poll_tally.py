"""The class's answers counted beside the model's figure (tally.py) and the room summary's CSV (summary.py)."""
import csv
import io

from pipeline.server.polls.record import new_poll
from pipeline.server.polls.summary import summary_csv
from pipeline.server.polls.tally import OTHERS, class_view, real_answer, spread

QUERY = {"q": "What is the capital of France?"}
TOP = {"top": [{"id": 7, "label": "␣Paris", "text": " Paris", "probability": 0.6},
               {"id": 9, "label": "␣The", "text": " The", "probability": 0.2}]}


def test_next_token_guesses_are_matched_to_the_models_tokens_by_their_text():
    poll = new_poll("next_token", "", QUERY, real=TOP)
    rows = class_view(poll, ["Paris", " paris ", "PARIS", "the", "Lyon", "<b>Lyon</b>"])
    assert [(r.answer, r.count, r.model, r.real) for r in rows] == [
        ("␣Paris", 3, 0.6, True), ("␣The", 1, 0.2, False), ("Lyon", 1, None, False), ("<b>Lyon</b>", 1, None, False)]
    many = class_view(poll, [f"word {i}" for i in range(20)])
    assert many[-1].answer == OTHERS and many[-1].count == 20 - 12
    assert real_answer(poll) == "␣Paris 60.0%, ␣The 20.0%"


def test_numbers_yes_no_and_positions():
    tokens = new_poll("tokens", "", QUERY, real={"count": 30, "answer": "30", "tokens": []})
    rows = class_view(tokens, ["25", "40", "25", "100"])
    assert [(r.answer, r.count, r.real) for r in rows] == [("25", 2, False), ("30", 0, True), ("40", 1, False),
                                                           ("100", 1, False)]  # the real count shown, even unguessed
    assert spread(tokens, ["25", "40", "25", "100"]) == {"min": 25, "median": 32.5, "max": 100}
    agree = new_poll("temperature", "", QUERY, real={"temperature": 0.0, "seed": 0, "ids": [5] * 10,
                                                     "draws": ["a"] * 10, "agree": True, "answer": "yes"})
    assert [(r.answer, r.count, r.real) for r in class_view(agree, ["no", "no", "yes"])] == [("yes", 1, True),
                                                                                          ("no", 2, False)]
    assert real_answer(agree).startswith("all 10 agree at temperature 0")
    heads = new_poll("attention", "", QUERY, choices=["(0) <s>", "(1) ␣the", "(2) ␣cat"],
                     real={"layer": 2, "head": 0, "start": 0, "weights": [0.7, 0.1, 0.2], "answer": "0", "position": 0})
    rows = class_view(heads, ["2", "2", "1"])
    assert [(r.answer, r.count, r.model, r.real) for r in rows] == [
        ("(0) <s>", 0, 0.7, True), ("(1) ␣the", 1, 0.1, False), ("(2) ␣cat", 2, 0.2, False)]


def test_the_csv_keeps_a_learners_formula_as_text_and_counts_questions():
    poll = new_poll("next_token", "Next?", QUERY, real=TOP)
    text = summary_csv([(poll, ["=HYPERLINK(\"http://evil.example.org\")", "Paris"])], questions_asked=4)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[0]["answer"] == "␣Paris" and rows[0]["learners"] == "1" and rows[0]["is_real"] == "yes"
    assert any(r["answer"].startswith("'=HYPERLINK") for r in rows)
    assert rows[-1]["poll"] == "questions learners asked" and rows[-1]["learners"] == "4"
