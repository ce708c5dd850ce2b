"""A tiny tmpfs to fill, for what a full disk does."""
import contextlib
import subprocess

import pytest


@contextlib.contextmanager
def tiny_tmpfs(folder, size="64k"):
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def fill(folder):
    """Write into `folder` until the disk is full."""
    with open(folder / "filler", "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"x" * 4096)
