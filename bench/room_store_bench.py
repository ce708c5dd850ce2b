"""Writes per second into the room store's folder, empty and full (5,000 files), interleaved and repeated.

  .venv/bin/python bench/room_store_bench.py [--files 5000] [--writes 200] [--repeats 5] [--against OLD_ROOM_PY]

Each repeat times `--writes` short links (each one file, written atomically with an fsync) into a folder that holds
no file, then into one filled to the bound; with --against (a copy of an older pipeline/server/room.py, e.g.
`git show 7ddd923:pipeline/server/room.py > /tmp/old_room.py`) the older store's two cases run in the same
repeat, beside this one's. Reports each case's median writes/s and its range over the repeats.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pipeline.server.room import RoomStore


def load(path: str):
    spec = importlib.util.spec_from_file_location("older_room", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RoomStore


def rate(store_class, files: int, writes: int, full: bool) -> float:
    with tempfile.TemporaryDirectory() as folder:
        store = store_class(Path(folder), max_files=files)
        if full:
            for i in range(files):  # written directly: the filling is not what is timed
                (Path(folder) / f"link-{i:010x}.json").write_text('{"query": {}}')
            store = store_class(Path(folder), max_files=files)  # a store started on a full folder
        t0 = time.perf_counter()
        for i in range(writes):
            store.put_link({"q": f"question {i}"})
        return writes / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--against", help="an older room.py to time beside this one")
    args = ap.parse_args()
    stores = {"this": RoomStore} | ({"older": load(args.against)} if args.against else {})
    seen: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, cls in stores.items():  # interleaved: a shared machine's speed moves from minute to minute
            for full in (False, True):
                seen.setdefault(f"{name}, {'full' if full else 'empty'}", []).append(
                    rate(cls, args.files, args.writes, full))
    for case, rates in seen.items():
        print(f"{case:>12}: {statistics.median(rates):7.1f} writes/s (range {min(rates):.1f}-{max(rates):.1f}, "
              f"{len(rates)} repeats of {args.writes} writes; bound {args.files} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
