"""Plugin: the marker `numeric` on every test that compares two float32 computations, i.e. calls a helper of
kit.tolerance (itself or through the functions of its module it calls), so that `./run.sh test` can run just those
again under another CPU capability (docs/testing.md#numeric-tolerances): `pytest -m numeric`."""
import inspect
import types

import pytest

from kit import tolerance

HELPERS = {name for name, value in vars(tolerance).items() if callable(value) and not name.startswith("_")}


def pytest_configure(config):
    config.addinivalue_line("markers", "numeric: compares two float32 computations (calls kit.tolerance); set by "
                                       "tests/kit/numeric.py")


def _calls_a_helper(function, module, seen: set) -> bool:
    """Whether `function`, or a function of `module` it names (to any depth), names a kit.tolerance helper."""
    code = getattr(function, "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    names = set(code.co_names) | {n for c in code.co_consts if isinstance(c, types.CodeType) for n in c.co_names}
    if names & HELPERS:
        return True
    return any(_calls_a_helper(getattr(module, n), module, seen) for n in names
               if inspect.isfunction(getattr(module, n, None)) and getattr(module, n).__module__ == module.__name__)


def pytest_collection_modifyitems(items):
    for item in items:
        function = getattr(item, "function", None)
        if function is not None and _calls_a_helper(function, item.module, set()):
            item.add_marker(pytest.mark.numeric)
