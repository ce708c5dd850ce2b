"""The order `./run.sh test` hands files to its workers (tests/kit/file_order.py): browser files beside the others,
each lane longest first, the next file from the lane that has handed out fewer seconds."""
import pytest
from kit.file_order import interleaved_files


class Item:
    """What the order reads of a collected test: its node id and its tier marker."""

    def __init__(self, nodeid: str, tier: str | None = None):
        self.nodeid, self.tier = nodeid, tier

    def get_closest_marker(self, name: str):
        return pytest.mark.browser if name == self.tier else None


def test_the_lanes_alternate_by_seconds_handed_out_longest_first():
    items = [Item("tests/a/test_fast.py::t1"), Item("tests/a/test_fast.py::t2"),
             Item("tests/browser/test_short.py::t", "browser"), Item("tests/browser/test_long.py::t", "browser"),
             Item("tests/a/test_model.py::t", "model")]
    measured = {"tests/a/test_fast.py": 5.0, "tests/browser/test_short.py": 20.0,
                "tests/browser/test_long.py": 100.0, "tests/a/test_model.py": 60.0}
    # the longest browser file first; the others' lane then hands out 60 s and 5 s (65 < 100) before the next
    assert interleaved_files(items, measured) == ["tests/browser/test_long.py", "tests/a/test_model.py",
                                                  "tests/a/test_fast.py", "tests/browser/test_short.py"]


def test_a_file_not_measured_counts_its_tests_by_tier():
    items = [Item("tests/browser/test_new.py::t1", "browser"), Item("tests/browser/test_new.py::t2", "browser"),
             Item("tests/a/test_model.py::t", "model")]
    # the new browser file: 2 tests at 15 s, 30 s; the model file measured at 40 s
    order = interleaved_files(items, {"tests/a/test_model.py": 40.0})
    assert order == ["tests/browser/test_new.py", "tests/a/test_model.py"]
    # with nothing measured each file appears once, whatever its tests' order
    assert sorted(interleaved_files(items[::-1], {})) == sorted(order)
