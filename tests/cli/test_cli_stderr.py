"""The command line's stderr (and the server's log) carries only what concerns the user: the lines torchao and torch
log when they are imported (a kernel library that does not load on this machine, a deprecated registration) are
dropped at the process's start (pipeline/server/process.py's quiet_library_noise), and nothing else is (fast tier:
processes, no model weights)."""
import subprocess
import sys
from pathlib import Path

from kit.paths import ROOT

NOISE = ("Failed to load", "_C_mxfp8", "_pytree", "is an Enum subclass")


def python(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_a_command_that_imports_transformers_prints_no_library_noise(tokenizer):
    """`tokens` loads the tokenizers through transformers, which imports torchao and with it torch's _pytree."""
    done = python("-m", "pipeline", "tokens", "Are tomatoes fruit?")
    assert done.returncode == 0, done.stderr
    assert "tokens" in done.stdout.lower()
    assert not [line for line in done.stderr.splitlines() if any(n in line for n in NOISE)], done.stderr


def test_only_those_lines_are_dropped():
    """The same loggers' other lines still reach their handlers: the filter matches the two messages, not the
    loggers (in this process: the records as torchao and torch make them, without importing either)."""
    import logging

    from pipeline.server.process import quiet_library_noise

    quiet_library_noise()
    kept: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: kept.append(record.getMessage())
    loggers = [logging.getLogger("torchao"), logging.getLogger("torch.utils._pytree")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        loggers[0].warning("Failed to load /venv/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: "
                           "Could not load this library")
        loggers[0].warning("Failed to load the user's config.json")
        loggers[1].warning("%s is an Enum subclass and is now natively supported by torch.compile as an opaque value "
                           "type. Calling register_constant() on Enum subclasses is deprecated", "<enum 'X'>")
        loggers[1].warning("a real pytree problem")
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    assert kept == ["Failed to load the user's config.json", "a real pytree problem"]


def test_the_app_quiets_them_before_anything_imports_torch():
    """app.py calls it among the process settings made before torch loads (with wait_passively)."""
    source = (Path(ROOT) / "app.py").read_text(encoding="utf-8")
    assert source.index("quiet_library_noise()") < source.index("import streamlit")
