"""A finished run sent as a stream (pipeline.api.replay): the run's own text pieces, each with its tokens' logprobs."""
from pipeline.api.replay import pieces
from pipeline.stages.decode_record import EventKind, StreamEvent


def delta(step: int, text: str) -> StreamEvent:
    return StreamEvent(EventKind.TEXT_DELTA, "r", step, 0.0, delta=text)


def entries(n: int) -> list[dict]:
    return [{"token": f"t{i}", "logprob": -float(i)} for i in range(n)]


def test_each_piece_carries_the_tokens_that_completed_it():
    lp = entries(4)
    assert pieces([delta(1, "Hel"), delta(3, "lo")], lp) == [("Hel", lp[0:2]), ("lo", lp[2:4])]


def test_tokens_after_the_last_text_come_in_a_last_empty_piece_and_the_completed_event_is_skipped():
    lp = entries(5)
    done = StreamEvent(EventKind.COMPLETED, "r", 4, 0.0, text="Hi")
    assert pieces([delta(0, "Hi"), done], lp) == [("Hi", lp[0:1]), ("", lp[1:5])]


def test_without_logprobs_only_the_text():
    assert pieces([delta(0, "a"), delta(2, "b")], None) == [("a", None), ("b", None)]


def test_an_event_past_the_answers_tokens_carries_what_is_left():
    """The end token is not an answer token (no logprobs entry): a delta completed at its step takes no entry."""
    lp = entries(2)
    assert pieces([delta(1, "ab"), delta(2, "!")], lp) == [("ab", lp[0:2]), ("!", [])]
