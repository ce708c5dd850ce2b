"""Files the CLI and the stores write and read (fast tier, no model weights): atomic writes that keep the
old file on failure, targets and inputs checked before any work, control characters escaped on the
terminal, and the disk store's temporaries and read-only folders."""
import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from kit.cli import run_cli
from kit.disk import fill, tiny_tmpfs
from kit.paths import ROOT
from kit.tolerance import any_logit_tolerance, assert_within, float32_tolerance, lens_tolerance

from pipeline.cli.terminal import safe_output, terminal_text
from pipeline.core.errors import InputError
from pipeline.core.files import STALE_AFTER_S, check_output_file, remove_stale_temporaries, write_atomic
from pipeline.model import weights_cache
from pipeline.prompt_cache import audit as ca
from pipeline.server.store.disk import DiskStore

EXAMPLE_LOG = str(ca.EXAMPLES_DIR / "support_chatbot_trap.jsonl")


def run_process(tmp_path, *argv):
    """`python -m pipeline ...` in a new interpreter, with the weights cache run_cli makes unusable: for the tests
    whose point is the process."""
    unusable = tmp_path / "not-a-folder"
    unusable.write_text("")
    env = {**os.environ, weights_cache.CACHE_ENV: str(unusable / "cache")}
    return subprocess.run([sys.executable, "-m", "pipeline", *argv], cwd=ROOT, env=env, capture_output=True,
                          timeout=120)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "log.fifo"
    os.mkfifo(path)
    return str(path)


BAD = [
    (["trace", "hi", "--force", "²:1"], "force"),  # str.isdigit accepts '²', int() does not
    (["trace", "hi", "--force", "1:١"], "force"),  # an Arabic-Indic digit
    (["trace", "hi", "--json", "/dev/full"], "json"),  # a device: would fail only after the run
    (["trace", "hi", "--json", "/proc/version"], "json"),  # a folder that takes no new file
    (["trace", "hi", "--json", ""], "json"),
    (["report", "hi", "--html", "/dev/full"], "html"),
    (["cache-audit", "/dev/zero"], "file"),  # size 0 passed the size check, then MemoryError
    (["cache-audit", EXAMPLE_LOG, "--json", "/dev/full"], "json"),
]
# Reads that blocked for ever: run as processes, which the test can time out
BLOCKING = [
    (["cache-audit", "{fifo}"], "file"),  # opening it blocked forever
    (["trace", "hi", "--model", "{fifo_model}"], "model"),  # its config.json a FIFO: the read blocked
]


@pytest.mark.parametrize("args,field", BAD, ids=lambda v: " ".join(v)[:40] if isinstance(v, list) else v)
def test_cli_refuses_unusable_files_and_odd_digits_before_any_work(tmp_path, args, field):
    code, out, err = run_cli(tmp_path, *args)
    assert code == 2, (code, err)
    assert f"error: {field}: " in err and "Traceback" not in err, err
    assert out == ""


@pytest.mark.parametrize("args,field", BLOCKING, ids=lambda v: " ".join(v)[:40] if isinstance(v, list) else v)
def test_cli_refuses_fifos_before_reading_them(tmp_path, fifo, args, field):
    """A subprocess: were the check gone, the read would block, and only a process can be timed out (and this keeps
    `python -m pipeline` itself exiting 2 on bad input covered)."""
    fifo_model = tmp_path / "fifo-model"
    fifo_model.mkdir()
    os.mkfifo(fifo_model / "config.json")
    proc = run_process(tmp_path, *(a.format(fifo=fifo, fifo_model=fifo_model) for a in args))
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, (proc.returncode, stderr)
    assert f"error: {field}: " in stderr and "Traceback" not in stderr, stderr
    assert proc.stdout == b""


def test_run_cli_gives_the_exit_status_and_puts_everything_back(tmp_path, monkeypatch):
    """The in-process run (tests/cli_kit.py) as the process: argparse's own error exits 2 with its line on stderr,
    an uncaught exception exits 1 with a traceback; the environment (which the CLI sets a default in), cwd, streams
    and the loader's models are as they were."""
    from pipeline.cli.commands import tokens
    from pipeline.model import loader

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    state = lambda: (dict(os.environ), os.getcwd(), sys.stdout, sys.stderr, loader._shared, loader.load_model)  # noqa: E731
    before = state()
    code, out, err = run_cli(tmp_path, "trace")
    assert (code, out) == (2, "") and "the following arguments are required: question" in err, err

    def boom(_args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(tokens, "run", boom)
    code, out, err = run_cli(tmp_path, "tokens", "hi")
    assert code == 1 and "Traceback" in err and "RuntimeError: a bug" in err, err
    assert state() == before


# ---- a failed write keeps the old file ------------------------------------------------------------------
def test_write_atomic_keeps_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "precious.json"
    target.write_text('{"valid": true}')

    def half_then_fail(f):
        f.write('{"trunc')
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_atomic(target, half_then_fail, text=True)
    assert target.read_text() == '{"valid": true}'
    assert os.listdir(tmp_path) == ["precious.json"]  # no temporary left


def test_write_atomic_replaces_keeping_permissions_and_symlinks(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, lambda f: f.write("new"), text=True)
    assert link.is_symlink() and real.read_text() == "new"
    assert real.stat().st_mode & 0o777 == 0o640


def test_cli_on_a_full_disk_keeps_the_old_file_and_exits_2(tmp_path):
    with tiny_tmpfs(tmp_path / "disk") as disk:
        precious = disk / "precious.json"
        precious.write_text('{"valid": true}')
        fill(disk)
        code, _out, err = run_cli(tmp_path, "cache-audit", EXAMPLE_LOG, "--json", str(precious))
        assert code == 2, err
        assert "error: json: could not write the audit" in err and "Traceback" not in err, err
        assert precious.read_text() == '{"valid": true}'
        assert sorted(os.listdir(disk)) == ["filler", "precious.json"]


def test_check_output_file_accepts_a_new_or_regular_file_and_leaves_nothing(tmp_path):
    check_output_file(str(tmp_path / "new.json"), "json")
    (tmp_path / "old.json").write_text("{}")
    check_output_file(str(tmp_path / "old.json"), "json")
    assert os.listdir(tmp_path) == ["old.json"]
    with pytest.raises(InputError, match="does not exist") as err:
        check_output_file(str(tmp_path / "missing" / "x.json"), "html")
    assert err.value.field == "html"


# ---- the terminal ---------------------------------------------------------------------------------------
def test_terminal_text_escapes_controls_and_keeps_newlines():
    assert terminal_text("\x1b[2J\x1b]0;pwned\x07ok\n\tend\r") == "\\x1b[2J\\x1b]0;pwned\\x07ok\n\tend\\x0d"
    assert terminal_text("abc\u202edef \udcff tomate 🍅") == "abc\\u202edef \\udcff tomate 🍅"
    assert terminal_text("\x9b31m") == "\\x9b31m"  # the one-byte CSI


def test_everything_printed_goes_through_the_escape():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), safe_output():
        print("title \x1b]0;pwned\x07")
        print("clear \x1b[2J", file=sys.stderr)
    assert out.getvalue() == "title \\x1b]0;pwned\\x07\n" and err.getvalue() == "clear \\x1b[2J\n"


def test_cli_error_messages_show_control_characters_escaped(tmp_path):
    code, _out, err = run_cli(tmp_path, "cache-audit", str(tmp_path / "\x1b[2J\x1b]0;pwned\x07.jsonl"))
    assert code == 2
    assert "\x1b" not in err and "\x07" not in err
    assert "\\x1b[2J\\x1b]0;pwned\\x07.jsonl does not exist" in err


# ---- the disk store: what a crash left, a read-only folder -----------------------------------------------
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_disk_store_removes_temporaries_of_dead_writers_at_start_and_keeps_live_ones(tmp_path):
    dead = tmp_path / f".abc.run.pkl.{dead_pid()}.140001.tmp"
    dead.write_bytes(b"x" * 1000)
    live = tmp_path / f".def.run.pkl.{os.getpid()}.{threading.get_ident() + 1}.tmp"  # another thread, writing
    live.write_bytes(b"y" * 10)
    stranger = tmp_path / "notes.txt"  # not ours: never deleted
    stranger.write_text("keep")
    DiskStore(tmp_path)
    assert not dead.exists() and live.exists() and stranger.exists()


def test_room_store_removes_temporaries_of_dead_writers_too(tmp_path, monkeypatch):
    """Short links and rooms are written the same way as runs; a replica killed mid-write left its
    temporary in the room folder for ever (only the disk store of runs cleaned). The store lists its folder again
    at most once a minute (pipeline/server/room_index.py), and cleans then: here at every write."""
    from pipeline.server.room import RoomStore

    monkeypatch.setattr("pipeline.server.room_index.RESCAN_S", 0.0)

    dead = tmp_path / f".link-abc.json.{dead_pid()}.140001.tmp"
    dead.write_text("{")
    live = tmp_path / f".room-abc123.json.{os.getpid()}.{threading.get_ident() + 1}.tmp"
    live.write_text("{")
    store = RoomStore(tmp_path)
    assert not dead.exists() and live.exists()
    later = tmp_path / f".link-def.json.{dead_pid()}.140002.tmp"  # a replica killed while this one runs
    later.write_text("{")
    assert store.put_link({"q": "hi"}) is not None and not later.exists() and live.exists()
    assert RoomStore(tmp_path / "not yet made").link("abcdef1234") is None  # no folder: nothing to clean


def test_a_temporary_older_than_the_limit_goes_even_if_its_pid_is_alive(tmp_path):
    old = tmp_path / f".abc.run.pkl.{os.getpid()}.1.tmp"  # pid reused by a live process
    old.write_bytes(b"x")
    remove_stale_temporaries(tmp_path, now=time.time() + 60)
    assert old.exists()
    remove_stale_temporaries(tmp_path, now=time.time() + STALE_AFTER_S + 60)
    assert not old.exists()


def test_disk_store_bound_counts_every_file_in_the_folder(tmp_path):
    run_size = len(__import__("pickle").dumps(b"r" * 1000, protocol=5))
    live = tmp_path / f".x.run.pkl.{os.getpid()}.7.tmp"  # a live writer's half file: counted, not deleted
    live.write_bytes(b"t" * 3000)
    disk = DiskStore(tmp_path, max_bytes=3000 + 2 * run_size + 100)
    assert disk.bytes_held == 3000
    for k in range(3):
        disk.put(k, b"r" * 1000)
    assert disk.get(0) is None and disk.get(1) is not None and disk.get(2) is not None  # the oldest went
    assert disk.bytes_held == 3000 + 2 * run_size and live.exists()


def test_killed_writers_leave_temporaries_that_the_next_start_removes(tmp_path):
    """kill -9 in the middle of put(): the temporary survives its writer; the next start removes it."""
    written = 100_000  # bytes the writer has put in its temporary when it is killed
    code = ("import sys, pickle; from pipeline.server.store.disk import DiskStore\n"
            "def slow(obj, fh, protocol=None):\n"
            f"    fh.write(b'x' * {written}); fh.flush(); print('writing', flush=True); sys.stdin.read()\n"
            "pickle.dump = slow\n"
            f"DiskStore({str(tmp_path)!r}).put('k', b'v')\n")
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdout.readline() == b"writing\n"
        proc.kill()
        proc.wait()
        left = [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
        assert len(left) == 1  # its own; the start of the second writer removed the first one's
        assert os.path.getsize(tmp_path / left[0]) == written
    assert DiskStore(tmp_path).bytes_held == 0
    assert os.listdir(tmp_path) == []


def test_disk_store_in_a_read_only_folder_is_off_but_reads_and_never_raises(tmp_path):
    with tiny_tmpfs(tmp_path / "cache", size="1m") as cache:
        DiskStore(cache / "runs").put("kept", [1, 2])
        subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
        store = DiskStore(cache / "runs")  # exists: still readable
        assert store.problem and "cannot be written" in store.problem
        assert store.get("kept") == [1, 2]
        store.put("new", [3])  # nothing raised; kept in memory until the folder takes files (test_disk_full.py)
        assert store.get("new") == [3] and store.waiting == 1 and "Read-only file system" in store.problem
        assert not (cache / "runs" / store.path("new").name).exists()
        fresh = DiskStore(cache / "other")  # cannot even be created
        assert fresh.problem and fresh.get("x") is None and fresh.bytes_held == 0
        fresh.put("x", 1)


# ---- the weights cache: a truncated weights file, a full disk during the conversion -----------------------
def save_weights(folder, n: int = 1000):
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({"w": np.arange(n, dtype=np.float32)}, str(folder / weights_cache.WEIGHTS_FILE))
    return folder / weights_cache.WEIGHTS_FILE


def test_safetensors_complete_reads_the_header_and_the_length(tmp_path):
    path = save_weights(tmp_path)
    assert weights_cache.safetensors_complete(path)
    path.write_bytes(path.read_bytes()[:-1])  # one byte short
    assert not weights_cache.safetensors_complete(path)
    path.write_bytes(b"\xff" * 16)  # a header length past the file
    assert not weights_cache.safetensors_complete(path)
    assert not weights_cache.safetensors_complete(tmp_path / "missing.safetensors")


class FakeConversion:
    """transformers' Auto classes for the conversion, without the GGUF: save_pretrained writes `n` floats."""

    def __init__(self, n: int):
        self.n, self.loaded = n, 0

    def names(self, *names):
        conversion = self

        class Model:
            config = type("Config", (), {})()

            def save_pretrained(self, folder):
                save_weights(folder, conversion.n)
                (folder / "config.json").write_text('{"model_type": "llama"}')

        class Auto:
            @staticmethod
            def from_pretrained(*_args, **_kwargs):
                conversion.loaded += 1
                return Model()

        Auto.save_pretrained = lambda *a: None
        return [Auto for _ in names]


@pytest.fixture
def fake_conversion(tmp_path, monkeypatch):
    from pipeline.model import hf_imports

    monkeypatch.setattr(weights_cache, "CONVERSION_NEEDS_BYTES", 0)
    monkeypatch.setattr(weights_cache, "gguf_path", lambda _m=None: tmp_path / "model.gguf")

    def use(n: int) -> FakeConversion:
        fake = FakeConversion(n)
        monkeypatch.setattr(hf_imports, "transformers_names", fake.names)
        return fake

    return use


def test_a_truncated_weights_cache_is_converted_again(tmp_path, monkeypatch, fake_conversion):
    monkeypatch.setenv(weights_cache.CACHE_ENV, str(tmp_path / "cache"))
    target = weights_cache.weights_cache_dir()
    weights = save_weights(target)
    (target / "config.json").write_text('{"model_type": "llama"}')
    weights.write_bytes(weights.read_bytes()[:100])  # the copy was cut short
    fake = fake_conversion(1000)
    said = []
    assert weights_cache.ensure_weights_cache(log=said.append) == target
    assert fake.loaded == 2 and weights_cache.cache_ready(target)  # model and tokenizer loaded, cache whole
    assert "is damaged" in said[0]
    weights_cache.ensure_weights_cache(log=said.append)  # whole now: not converted again
    assert fake.loaded == 2


def test_a_full_disk_during_the_conversion_leaves_nothing_and_says_so(tmp_path, fake_conversion):
    fake_conversion(100_000)  # 400 kB of weights
    with tiny_tmpfs(tmp_path / "disk") as disk:
        with pytest.raises(InputError) as err:
            weights_cache.convert_gguf_to_cache(disk / "weights", log=lambda _msg: None)
        assert err.value.field == weights_cache.CACHE_ENV and "could not write the weights cache" in str(err.value)
        assert [p.name for p in disk.iterdir() if not p.name.endswith(".lock")] == []  # no .partial-PID left


def test_cli_with_a_model_folder_whose_weights_are_cut_short_exits_2(tmp_path):
    """A tiny Llama config beside a truncated model.safetensors: SafetensorError, shown as a message."""
    folder = tmp_path / "tiny"
    weights = save_weights(folder)
    weights.write_bytes(weights.read_bytes()[:-100])
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}))
    code, _out, err = run_cli(tmp_path, "trace", "hi", "--model", str(folder))
    assert code == 2, err
    assert "error: model: " in err and "SafetensorError" in err and "Traceback" not in err, err


def test_pages_work_from_a_read_only_cache_folder_and_say_the_store_is_off(tmp_path, monkeypatch, tiny_app):
    """A cache folder holding the weights, on a read-only bind mount (root ignores chmod, not a read-only
    mount): runs/ cannot be created. The page draws its run from memory and says runs are not saved."""
    from streamlit.testing.v1 import AppTest

    from views.server.state import model_handle, result_store, run_queue, run_store
    from views.server.warm_up import warm_up

    ro = tmp_path / "ro"  # a read-only cache folder holding the converted weights (mounted in) and nothing else
    weights = ro / weights_cache.weights_cache_dir().name
    weights.mkdir(parents=True)
    mounts = []
    if subprocess.run(["mount", "--bind", str(ro), str(ro)], capture_output=True).returncode:
        pytest.skip("bind mounts are not permitted here")
    mounts.append(ro)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
        subprocess.run(["mount", "--bind", "-o", "ro", str(weights_cache.weights_cache_dir()), str(weights)],
                       check=True)
        mounts.append(weights)
        assert not (ro / "runs").exists()
        monkeypatch.setenv(weights_cache.CACHE_ENV, str(ro))
        for resource in (model_handle, run_store, result_store, run_queue, warm_up):
            resource.clear()
        at = AppTest.from_file(str(ROOT + "/views/pages/tokens.py"), default_timeout=300)
        at.session_state["req_max_new_tokens"] = 2
        at.run()
        assert not at.exception, at.exception
        assert any("kept in memory only" in c.value and "Read-only file system" in c.value for c in at.caption)
    finally:
        for store in (run_store(), result_store()):  # their retry threads would write (and log) once unmounted
            if store.disk is not None:
                store.disk.close()
        for resource in (model_handle, run_store, result_store, run_queue, warm_up):
            resource.clear()  # the next test gets stores on its own folder
        for mount in reversed(mounts):
            subprocess.run(["umount", "--lazy", str(mount)], check=True)  # the loaded weights may map the file


@pytest.mark.model
def test_trace_prints_control_characters_from_the_question_escaped(tmp_path):
    """The question reaches the terminal in the request, the template and the tokens: never raw. A subprocess: the
    real streams, which a handler holding the original stderr (transformers' logging) would write to unfiltered."""
    out = tmp_path / "trace.json"
    proc = subprocess.run([sys.executable, "-m", "pipeline", "trace", "\x1b[2J\x1b]0;pwned\x07 hi", "--max-new-tokens",
                           "2", "--json", str(out)], cwd=ROOT, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()
    for stream in (proc.stdout, proc.stderr):
        assert not any(b in stream for b in (b"\x1b", b"\x07", b"\r")), stream[-300:]
    assert "\\x1b[2J\\x1b]0;pwned\\x07 hi<|im_end|>" in proc.stdout.decode()
    assert json.loads(out.read_text())["prompt_text"].count("\x1b[2J") == 1  # the file holds it as typed


def test_write_atomic_text_writes_a_lone_surrogate_as_a_json_escape(tmp_path):
    target = tmp_path / "out.json"
    write_atomic(target, lambda f: json.dump({"s": "a\udcffb"}, f, ensure_ascii=False), text=True)
    assert json.loads(target.read_text(encoding="utf-8")) == {"s": "a\udcffb"}


def test_a_reader_that_goes_away_ends_the_cli_quietly(tmp_path):
    """`python -m pipeline cache-audit LOG | head -1`: the pipe closes; no BrokenPipeError traceback. A subprocess:
    the point is its own stdout, a pipe whose reader has gone."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        proc = subprocess.run([sys.executable, "-m", "pipeline", "cache-audit", EXAMPLE_LOG], cwd=ROOT, stdout=write,
                              stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 1 and proc.stderr == b"", proc.stderr.decode()


def test_trace_tensors_json_has_the_best_next_tokens_after_every_prompt_position(tmp_path, tiny_app_model):
    """`trace --json F --tensors` adds top_ids / top_probs (T, 10): the LM head over the captured final norm (the
    prefill no longer computes it; no page reads it). Checked against the logit lens, which applies the final norm
    to the last residual stream by hand, and against the greedy answer's first token."""
    from pipeline.model.prefill_record import TOP_K_PER_POSITION
    from pipeline.model.weights_cache import weights_cache_dir
    from pipeline.stages.layers import logit_lens

    root, lm = tiny_app_model
    out = tmp_path / "trace.json"
    code, _printed, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--max-new-tokens", "2", "--json",
                                  str(out), "--tensors", "--model", str(root / weights_cache_dir().name))
    assert code == 0, err
    j = json.loads(out.read_text())
    T = len(j["tokens"])
    top_ids, top_probs = np.array(j["tensors"]["top_ids"]), np.array(j["tensors"]["top_probs"])
    assert top_ids.shape == top_probs.shape == (T, TOP_K_PER_POSITION)
    assert top_ids[-1, 0] == j["generated_token_ids"][0]  # greedy: the first answer token is the best one
    assert np.all(np.diff(top_probs, axis=1) <= 0) and np.all((top_probs > 0) & (top_probs <= 1))
    lens_ids, lens_probs = logit_lens(lm, np.array(j["tensors"]["hidden_states"], dtype=np.float32), k=1)
    # the lens recomputes the final norm and the head (kit.tolerance); a probability p moves by p (2 d + the
    # softmax's sum of V terms); the JSON keeps no logits, so a best token may differ only where its probability
    # is within that of the next one
    final = np.array(j["tensors"]["final_norm"], dtype=np.float32) if "final_norm" in j["tensors"] else None
    d = lens_tolerance(lm, final) if final is not None else any_logit_tolerance(lm, T)
    rtol = 2 * d + float32_tolerance(lm.dims.V, 1.0, depth=2)
    assert_within(lens_probs[-1, :, 0], top_probs[:, 0], rtol * top_probs[:, 0], "the lens's last layer")
    tie = top_probs[:, 0] - top_probs[:, 1] <= 2 * rtol * top_probs[:, 0]
    assert np.all((lens_ids[-1, :, 0] == top_ids[:, 0]) | tie)
