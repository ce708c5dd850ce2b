"""The room's schedule opens where its bars are wide enough to see (pipeline/room_schedule.first_view_start)."""
from pipeline.server.room_schedule import first_view_start


def row(queued_s: float, seconds: float) -> dict:
    return {"queued_s": queued_s, "left_s": queued_s + seconds}


def test_a_short_record_is_drawn_whole():
    rows = [row(t, 4.0) for t in (0, 3, 8, 15)]
    assert first_view_start(rows, 19.0) == 0


def test_a_1900_second_record_of_4_second_requests_opens_on_its_latest_ones():
    rows = [row(t, 4.0) for t in (0, 5, 10, 1_700, 1_800, 1_880, 1_890, 1_896)]
    start = first_view_start(rows, 1_900.0)
    assert start == 1_700  # from there each 4 s request is 2 % of the 200 s axis (about 17 px, not 1)
    assert 4.0 >= 0.02 * (1_900 - start) and 4.0 < 0.02 * (1_900 - 10)


def test_a_request_still_running_counts_until_now():
    rows = [row(0, 4.0), {"queued_s": 10.0, "left_s": None}]
    assert first_view_start(rows, 20.0) == 0
