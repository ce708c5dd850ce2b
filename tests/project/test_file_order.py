"""The order `./run.sh test` hands files to its workers (tests/kit/file_order.py): browser files beside the others,
each lane longest first, the next file from the lane that has handed out fewer seconds."""
import json

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


class WorkerConfig:
    """A pytest-xdist worker's config as the hook sees it: `workerinput` set, `option.dist` already "no" (xdist
    resets it in each worker before collection), `--no-loadscope-reorder` given or not."""

    def __init__(self, reorder: bool):
        self.workerinput = {"workerid": "gw0"}
        self.option = type("Option", (), {"dist": "no"})()
        self.reorder = reorder

    def getoption(self, name: str, default=None):
        return self.reorder if name == "loadscopereorder" else default


def test_a_worker_of_run_sh_test_sorts_its_items_by_that_order_and_other_runs_keep_theirs():
    from kit.file_order import FILE_SECONDS, pytest_collection_modifyitems

    measured = json.loads(FILE_SECONDS.read_text())
    collected = [Item("tests/ui/test_words.py::t"), Item("tests/browser/test_browser_room.py::t1", "browser"),
                 Item("tests/pipeline/model/test_plain_decoder.py::t", "model"),
                 Item("tests/browser/test_browser_room.py::t2", "browser")]
    items = list(collected)
    pytest_collection_modifyitems(WorkerConfig(reorder=False), items)
    assert [i.nodeid for i in items] == [i.nodeid for f in interleaved_files(collected, measured)
                                         for i in collected if i.nodeid.startswith(f + "::")]
    assert items[0].nodeid == "tests/browser/test_browser_room.py::t1" and items[1].nodeid.endswith("::t2")
    for config in (WorkerConfig(reorder=True), object()):  # xdist's own order; not a worker (no workerinput)
        kept = list(collected)
        pytest_collection_modifyitems(config, kept)
        assert kept == collected
