"""The Hypothesis profiles of tests/conftest.py, run on a failing property test in a separate pytest:
locally a failure prints its @reproduce_failure blob and the run's seed, the seed draws the same examples
again and the failure is kept in the example database; under CI=true the run is derandomized, with no database."""
import os
import re
import subprocess
import sys

from kit.paths import ROOT

PROPERTIES = '''
import os

import pytest
from hypothesis import given, strategies as st

pytestmark = pytest.mark.model  # a tier mark: the conftest's fast-tier fixture then leaves torch alone


@given(st.integers(0, 10**6))
def test_fails_from_1000(x):
    with open(os.environ["DRAWN"], "a") as f:
        f.write(f"{x}\\n")
    assert x < 1000
'''


def _pytest(folder, *args, ci: bool):
    """Run the property with our conftest as a plugin, in `folder` (its cwd: the database goes there)."""
    folder.mkdir()
    (folder / "test_properties_here.py").write_text(PROPERTIES)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "tests"), ROOT]), DRAWN=str(folder / "drawn.txt"),
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", **({"CI": "true"} if ci else {}))  # only the plugins named here
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "_hypothesis_pytestplugin", "-p", "conftest",
                          "-p", "no:cacheprovider",
                          "-W", "ignore::pytest.PytestUnknownMarkWarning",
                          "--rootdir", str(folder), *args, str(folder)],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]  # the property failed
    return out.stdout, (folder / "drawn.txt").read_text().split()


def test_a_local_failure_prints_blob_and_seed_and_the_seed_draws_the_same_examples(tmp_path):
    out, drawn = _pytest(tmp_path / "first", ci=False)
    assert "hypothesis profile 'local': example database" in out, out[-3000:]
    assert "@reproduce_failure(" in out and "x=1000" in out, out[-3000:]
    seeds = re.findall(r"-+ Hypothesis -+\nexamples drawn from seed (\d+): rerun with --hypothesis-seed=(\d+)", out)
    assert len(seeds) == 1 and seeds[0][0] == seeds[0][1], out[-3000:]
    assert list((tmp_path / "first" / ".hypothesis" / "examples").iterdir())  # the failure was kept

    again_out, again = _pytest(tmp_path / "again", f"--hypothesis-seed={seeds[0][0]}", ci=False)
    assert again == drawn and len(set(drawn)) > 10  # the same examples, in the same order
    assert "no random seed" in again_out and not (tmp_path / "again" / ".hypothesis" / "examples").exists()


def test_ci_is_derandomized_without_a_database(tmp_path):
    out, drawn = _pytest(tmp_path / "ci", ci=True)
    assert "hypothesis profile 'ci': derandomized, no example database" in out, out[-3000:]
    assert "@reproduce_failure(" in out and "no random seed: derandomized" in out
    assert not (tmp_path / "ci" / ".hypothesis" / "examples").exists()
    _, again = _pytest(tmp_path / "ci_again", ci=True)
    assert again == drawn  # no seed given, yet the same examples
