"""Long runs of chips say what they do not show (ui/more_below.py): no box hides tokens without a cue (fast tier)."""
import re

from pipeline.stages.tokens import Token
from ui.chips import draft_rounds, surprisal_chips, text_spans, token_chips
from ui.heat import heat_chips
from ui.more_below import fold


def visible(html: str) -> str:
    """What shows before anything is clicked: the HTML up to the folded part's end of summary."""
    return html.split("</summary>")[0]


def test_a_short_run_is_drawn_whole_with_no_cue_and_no_scroll_box():
    html = token_chips([Token(i, i, f"t{i}", "user", False) for i in range(20)], shown=30)
    assert "more below" not in html and "overflow" not in html and "max-height" not in html
    assert html.count("<span") == 20


def test_past_the_limit_the_rest_fold_under_a_cue_that_counts_them():
    tokens = [Token(i, i, f"t{i}", "user", False) for i in range(607)]
    html = token_chips(tokens, shown=300)
    assert "307 more tokens below" in visible(html)
    assert visible(html).count(">t") == 300 and "overflow" not in html  # every chip still in the page, none scrolls
    assert all(f">t{i}<" in html for i in range(607))
    assert "1 more token below" in token_chips(tokens[:301], shown=300)  # one, not "1 more tokens"


def test_a_character_spelled_by_several_tokens_is_never_split_by_the_fold():
    parts = ["a", "b", "<group of 3>", "c"]
    html = fold(parts, 3, sizes=[1, 1, 3, 1])
    assert html.startswith("ab<details>") and "4 more tokens below" in html


def test_every_chip_box_folds():
    many = 50
    assert "10 more tokens below" in surprisal_chips(["x"] * many, [1] * many, [1.0] * many, ["t"] * many, shown=40)
    assert "10 more tokens below" in heat_chips(["x"] * many, [0.5] * many, shown=40)
    rounds = [(s, ("a", 1), [("b", 2)], []) for s in range(20)]
    assert "8 more steps below" in draft_rounds(rounds, shown=12)


def test_text_spans_fold_on_token_stretches(tokenizer):
    from pipeline.text.pieces import token_pieces

    ids = tokenizer("토마토는 과일인가요? " * 20)["input_ids"]
    pieces = token_pieces(tokenizer, ids)
    html = text_spans(pieces, shown=40)
    n = int(re.search(r"(\d+) more tokens below", html).group(1))
    shown = sum(1 for _ in re.finditer(r"<span title='#", visible(html)))
    assert 0 < n <= len(ids) - 40 + 3 and shown < len(ids)
