"""The command line run in the test process: `run_cli(tmp_path, "trace", "hi", "--json", path)` ->
CliRun(code, out, err), as `python -m pipeline ...` (`python -m ui report ...` for the HTML report) would exit
and print, without a new interpreter that imports torch and transformers again (~3 s of CPU a run).

The run sees what the subprocess saw: the same environment, cwd ROOT, streams with the encoding and error
handlers of the process's own, SystemExit as the exit code and an uncaught exception as Python's traceback on
stderr with exit 1. By default TPE_CACHE_DIR names a file and no model loaded earlier in the test process is
seen, so a run that got as far as the weights fails naming TPE_CACHE_DIR: exit 2 naming the field under test
proves its check came first. Everything the run changed is put back afterwards (environment, cwd, streams, the
loader's caches of models). Tests whose point is the process itself (a reader that goes away, a read that would
block, imports) stay subprocesses and say why."""
from __future__ import annotations

import contextlib
import io
import os
import sys
import traceback
from typing import NamedTuple

import pytest

from kit.paths import ROOT
from pipeline.model import loader, weights_cache


def real_load_model():
    """The loader `python -m pipeline` would run: the fast tier replaces it with a refusal to load the real weights
    (which the unusable TPE_CACHE_DIR keeps out of reach here), while a --model folder a test made (broken on
    purpose) must load as it does in the process. A fake a test put in place stays."""
    current = loader.load_model
    return getattr(current, "real", current)


class CliRun(NamedTuple):
    code: int  # the exit status
    out: str  # stdout and stderr as the process's bytes decoded (utf-8, undecodable bytes replaced)
    err: str


def stream_like(real) -> io.TextIOWrapper:
    """A text stream over bytes with the encoding and error handler of the process's own `real` stream: what a
    subprocess could not write (a lone surrogate on a strict stream) fails here too."""
    return io.TextIOWrapper(io.BytesIO(), encoding=getattr(real, "encoding", None) or "utf-8",
                            errors=getattr(real, "errors", None) or "strict", newline="\n", write_through=True)


def main_of(argv: tuple[str, ...]):
    """The `main` that `python -m pipeline` or `python -m ui` runs for this command line."""
    if argv[:1] == ("report",):
        from ui.__main__ import main
    else:
        from pipeline.cli import main
    return main


def run_cli(tmp_path, *argv: str, real_weights: bool = False) -> CliRun:
    """Run the command line in-process. real_weights=False: a weights cache that cannot be used (see the module's
    docstring); True: this test run's own weights cache and the models it has loaded (the `model` tier)."""
    main = main_of(argv)
    out, err = stream_like(sys.__stdout__), stream_like(sys.__stderr__)
    environ, cwd = dict(os.environ), os.getcwd()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        if not real_weights:
            unusable = tmp_path / "not-a-folder"
            unusable.write_text("")
            mp.setenv(weights_cache.CACHE_ENV, str(unusable / "cache"))
            mp.setattr(loader, "load_model", real_load_model())
            mp.setattr(loader, "_shared", {})  # a fresh process has loaded no model
            mp.setattr(loader, "_converted", {})
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(list(argv))
                except SystemExit as e:  # argparse's own errors, sys.exit
                    code = exit_code(e.code)
                except Exception:  # noqa: BLE001 (what the interpreter does with an uncaught exception)
                    traceback.print_exc()
                    code = 1
        finally:
            for name in set(os.environ) - set(environ):  # also what the run set itself (HF_HUB_DISABLE_PROGRESS_BARS),
                del os.environ[name]  # name by name: other threads of the test process read the environment too
            os.environ.update({k: v for k, v in environ.items() if os.environ.get(k) != v})
            os.chdir(cwd)
    return CliRun(code, *(s.buffer.getvalue().decode("utf-8", "replace") for s in (out, err)))


def exit_code(code) -> int:
    """SystemExit's code as the process's status: None -> 0, a message -> 1 (Python prints it to stderr)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1
