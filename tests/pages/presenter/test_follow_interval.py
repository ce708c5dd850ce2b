"""How often a page in a room checks the presenter's stage: 3 s, or TPE_FOLLOW_EVERY_S where it is a usable number
(the browser tests' servers poll every second: tests/kit/browser.py)."""
import pytest

from views.pages.presenter.room import FOLLOW_EVERY_ENV, follow_every_s


@pytest.mark.parametrize("given,seconds", [(None, 3.0), ("1", 1.0), ("0.5", 0.5), ("60", 60.0), ("0", 3.0),
                                           ("0.01", 3.0), ("61", 3.0), ("-1", 3.0), ("nan", 3.0), ("inf", 3.0),
                                           ("soon", 3.0), ("", 3.0)])
def test_the_follow_poll_is_three_seconds_unless_a_usable_number_is_set(monkeypatch, given, seconds):
    if given is None:
        monkeypatch.delenv(FOLLOW_EVERY_ENV, raising=False)
    else:
        monkeypatch.setenv(FOLLOW_EVERY_ENV, given)
    assert follow_every_s() == seconds
