import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def lm():
    """The real SmolLM2-135M-Instruct, loaded once for the whole run."""
    from pipeline.loader import shared_model

    return shared_model()
