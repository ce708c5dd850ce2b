"""Files written so that a failure loses nothing, and the checks on files a user names.

Every file this program writes (the disk store's runs, the CLI's --json and --html) goes through
`write_atomic`: the bytes go to a temporary file beside the target, are flushed to disk, and only
then is it renamed over the target. A full disk or a crash mid-write leaves the old file as it was;
the temporary is removed, or, after a kill -9, left with a name `remove_stale_temporaries` knows:
`.NAME.PID.THREAD.tmp`.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import IO, Callable

from pipeline.core.errors import InputError

TEMPORARY = re.compile(r"^\..+\.(\d+)\.(\d+)\.tmp$")  # '.abc.run.pkl.4242.1397.tmp' -> pid 4242
NAME_MAX, PATH_MAX = 255, 4096  # bytes in one name, in a whole path (Linux's limits; the system's error decides)
STALE_AFTER_S = 15 * 60  # no write here takes minutes; a temporary this old belongs to nobody (pid reused)


def temporary_path(path: Path) -> Path:
    """'/d/out.json' -> '/d/.out.json.<pid>.<thread>.tmp': private to this thread, beside the target. A name too
    long to take the additions (a target's name may have up to 255 bytes) is replaced by its SHA-1."""
    suffix = f".{os.getpid()}.{threading.get_ident()}.tmp"
    name = path.name
    if len(f".{name}{suffix}".encode("utf-8", "surrogatepass")) > NAME_MAX:  # a lone surrogate counts 3, not 1
        name = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()
    return path.with_name(f".{name}{suffix}")


def write_atomic(path: str | os.PathLike, write: Callable[[IO], None], text: bool = False) -> None:
    """Call `write(f)` on a temporary file beside `path`, then rename it over `path`.

    A symlink is followed (the file it points to is replaced, the link kept); an existing file keeps its
    permissions. On any error the temporary is removed, `path` is untouched and the error is raised.
    """
    path = Path(os.path.realpath(path))
    tmp = temporary_path(path)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        # text: a lone surrogate (from a log read as bytes) is written as '\\udcff', which JSON reads back as it
        with (os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="") if text
              else os.fdopen(fd, "wb")) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_stale_temporaries(folder: Path, now: float | None = None) -> int:
    """Delete temporaries left in `folder` by writers that died (kill -9, power loss): those whose process
    is gone, or older than STALE_AFTER_S. A live writer's file is kept: replicas share the folder.
    Returns how many were removed."""
    now = time.time() if now is None else now
    removed = 0
    for p in folder.iterdir():
        match = TEMPORARY.match(p.name)
        if not match:
            continue
        try:
            old = now - p.stat().st_mtime > STALE_AFTER_S
            if old or not process_alive(int(match.group(1))):
                p.unlink()
                removed += 1
        except OSError:  # gone already (its writer finished), or a read-only folder
            continue
    return removed


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a pid we cannot ask about): assume alive
    return True


def check_output_file(path: str | None, field: str) -> None:
    """Refuse, before any work, a path a file cannot be written to: a folder, a device (/dev/full), a
    pipe, a folder that does not exist or takes no new files (/proc), a name the system refuses (over 255
    bytes, a NUL). Nothing is left behind."""
    if path is None:
        return
    if not path.strip():
        raise InputError(field, "give a file name.")
    try:
        _check_writable(path, field)
    except InputError:
        raise
    except (OSError, ValueError) as e:  # ValueError: a NUL byte; UnicodeEncodeError: a lone surrogate
        raise InputError(field, f"{path} cannot be written: {unusable_name(e)}.") from None


def _check_writable(path: str, field: str) -> None:
    real = Path(os.path.realpath(path))
    if real.is_dir():
        raise InputError(field, f"{path} is a folder; give a file name.")
    if real.exists() and not real.is_file():
        raise InputError(field, f"{path} is not a regular file (a device, a pipe or a socket); give a file name.")
    if not real.parent.is_dir():
        raise InputError(field, f"the folder {real.parent} does not exist.")
    if real.exists() and not os.access(real, os.W_OK):
        raise InputError(field, f"{path} cannot be written (permission denied).")
    probe = temporary_path(real)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as e:
        raise InputError(field, f"{path} cannot be written: {no_new_file(path, real, e)}.") from None


SYSTEM_FOLDERS = ("/proc", "/sys")  # files the kernel makes up as they are read: nothing can be saved there


def no_new_file(path: str, real: Path, e: OSError) -> str:
    """Why a file cannot be saved at `path` (resolved: `real`) when no new file can be made beside it, in words that
    name what was typed, not the folder a link leads to (/proc/self is /proc/4340, a number the user never typed).
    A file is saved whole: written as a new file in its folder, then renamed over the old one."""
    top = next((t for t in SYSTEM_FOLDERS if str(real) == t or str(real).startswith(t + "/")), None)
    if top is not None:
        return (f"it is under {top}, where the system shows its own state as files; nothing can be saved "
                "there. Give a file in a folder of your own")
    return (f"its folder ({os.path.dirname(os.path.abspath(path)) or '.'}) does not let a new file be made in it "
            f"({e.strerror}), and a file is saved by writing a new one beside it, then renaming it")


def unusable_name(e: OSError | ValueError) -> str:
    """Why the system refused a path, in words: 'the name is too long (...)' for ENAMETOOLONG."""
    if isinstance(e, UnicodeError):
        return "the name is not valid Unicode"
    if isinstance(e, ValueError):
        return "the name holds a NUL character"
    if e.errno == errno.ENAMETOOLONG:
        return (f"the name is too long (a file system takes names of at most {NAME_MAX} bytes and paths of at most "
                f"{PATH_MAX:,})")
    return e.strerror or str(e)


def check_input_file(path: str, field: str) -> Path:
    """A regular file that exists (not a device like /dev/zero, not a FIFO that would block forever)."""
    if not path.strip():
        raise InputError(field, "give a file name.")
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(field, f"{path} does not exist.") from None
    except (OSError, ValueError) as e:  # too long a name, a NUL byte, a lone surrogate
        raise InputError(field, f"{path} cannot be read: {unusable_name(e)}.") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(field, f"{path} is a folder; give a file.")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(field, f"{path} is not a regular file (a device, a pipe or a socket); give a file.")
    if not os.access(p, os.R_OK):
        raise InputError(field, f"{path} cannot be read (permission denied).")
    return p
