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
    """The same loggers' other lines still show: the filter matches the two messages, not the loggers."""
    code = ("from pipeline.server.process import quiet_library_noise\n"
            "quiet_library_noise()\n"
            "import logging, torchao\n"
            "logging.getLogger('torchao').warning('Failed to load the user\\'s config.json')\n"
            "logging.getLogger('torch.utils._pytree').warning('a real pytree problem')\n")
    done = python("-c", code)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert not [line for line in lines if "_C_" in line or "Enum subclass" in line], done.stderr
    assert any("Failed to load the user's config.json" in line for line in lines), done.stderr
    assert any("a real pytree problem" in line for line in lines), done.stderr


def test_the_app_quiets_them_before_anything_imports_torch():
    """app.py calls it among the process settings made before torch loads (with wait_passively)."""
    source = (Path(ROOT) / "app.py").read_text(encoding="utf-8")
    assert source.index("quiet_library_noise()") < source.index("import streamlit")
