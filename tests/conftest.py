"""The test run's set-up. Test tiers (markers registered in pyproject.toml):

  (none)   fast: pure logic, the tokenizer files and a tiny random-weight Llama; no model weights. Every
           page's AppTest is here too, on a tiny copy of SmolLM2's layout (fixture `tiny_app`): ids, shapes,
           links, escaping and the charts' numbers against Hugging Face's own forward pass
  model    loads the real SmolLM2-135M-Instruct (and Gemma-3-270M) weights: what the real weights answer,
           agreement with HF
  app      Streamlit AppTest on the real model: one smoke test per page group (Journey and Generation,
           Embeddings and Layers, Prompt caching, app.py), and the pages that show a real answer
  browser  Chromium through Playwright against a real server; servers run the tiny model (fixture
           `tiny_server_cache`) except where a walk checks the real answer (the Korean presenter walk, What if)

Fast tier alone: pytest -m "not model and not app and not browser"
Model tier alone (a GPU host without Streamlit, torchao, xgrammar or gguf; the weights cache copied there):
  pytest -m "model and not app and not browser" -k "not gemma"   (SmolLM2 only; the model goes on the GPU if any)

The helpers and fixtures live in tests/kit/, one module per job; the fixtures, the tiers and Hypothesis's profiles
are loaded here as plugins. This file keeps only what must be a conftest: the process set-up (before any test
module imports torch), the plugins and the files not collected.
"""
import importlib.util
from pathlib import Path

from hypothesis import settings
from kit.process_setup import prepare_test_process

prepare_test_process()

pytest_plugins = ["kit.hypothesis_profiles", "kit.model_fixtures", "kit.app_fixtures", "kit.browser_fixtures",
                  "kit.tiers", "kit.browser_report", "kit.numeric", "kit.redis_server"]


def _files_needing_absent_streamlit() -> list[str]:
    """The test files that import Streamlit at module level (the page tests), where Streamlit is not installed:
    a GPU host runs the model tier (`-m "model and not app and not browser"`) without the app's packages, and
    those files are then left out of collection (named in the report header) instead of failing it."""
    if importlib.util.find_spec("streamlit") is not None:
        return []
    return sorted(str(p.relative_to(Path(__file__).parent)) for p in Path(__file__).parent.rglob("test_*.py")
                  if any(line.startswith(("from streamlit", "import streamlit"))
                         for line in p.read_text(encoding="utf-8").splitlines()))


collect_ignore = _files_needing_absent_streamlit()


def pytest_report_header(config):
    name = settings.get_current_profile_name()
    lines = [f"hypothesis profile {name!r}: derandomized, no example database" if settings.default.derandomize
             else f"hypothesis profile {name!r}: example database {settings.default.database}"]
    if collect_ignore:
        lines.append(f"streamlit is not installed: not collected (page tests): {', '.join(collect_ignore)}")
    return lines
