"""Hypothesis's two profiles (local and ci), example counts, and the seed named in a failing report
(a pytest plugin: tests/conftest.py loads it)."""
import os

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings

# Property tests: modest example counts (each test sets its own), no deadline on 2 shared CPU cores. Two
# profiles, chosen by CI=true:
#   local  new examples every run; each failure found is kept in the example database, .hypothesis/ under the
#          cwd (git-ignored), and tried first next run; a failure prints the blob that replays it
#          (@reproduce_failure) and the seed its examples came from (`--hypothesis-seed=N`);
#   ci     derandomized: the examples follow from each test's code, so the run that decides a landing is the
#          same every time (derandomize implies no database).
# `--hypothesis-profile` and `--hypothesis-seed` override (Hypothesis uses no database under a given seed).
# A failure worth keeping also becomes an @example in its test.
CI = os.environ.get("CI") == "true"


_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


settings.register_profile("local", **_COMMON)  # Hypothesis's default database: .hypothesis/examples
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.load_profile("ci" if CI else "local")
LOCAL_EXAMPLES_SHARE = 4  # the local profile draws a quarter of each test's examples: `examples(n)`


def examples(n: int) -> int:
    """A property test's example count, @settings(max_examples=examples(100)): all n in the ci profile (the run
    that decides a landing), a quarter of them (10 at least) in the local one, where every run draws new examples
    and first replays the failures its database kept, so the examples add up over a newcomer's runs. Read when
    the test module is imported, after `--hypothesis-profile` is applied."""
    return n if settings.get_current_profile_name() == "ci" else max(10, n // LOCAL_EXAMPLES_SHARE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing property test's report says which seed its examples came from, beside Hypothesis's own
    @reproduce_failure blob (Hypothesis prints the seed itself only for flaky failures)."""
    outcome = yield
    report = outcome.get_result()
    test = getattr(item, "obj", None)
    if not (report.failed and report.when == "call" and is_hypothesis_test(test)):
        return
    # Hypothesis keeps the seed it drew on the test (a private name; test_hypothesis_setup.py notices a rename)
    seed = getattr(test, "_hypothesis_internal_use_generated_seed", None)  # None: derandomized or a given seed
    report.sections.append(("Hypothesis", f"examples drawn from seed {seed}: rerun with --hypothesis-seed={seed} "
                            "to draw them again (a failure replayed from the database: use the blob)"
                            if seed is not None else "no random seed: derandomized, or a seed was given"))
