"""When and where a measurement kept for everyone was made: a page shows it with its result, since a result kept on
disk (or in the room's Redis) may come from an earlier hour, a restarted server or another replica.

    dated(lambda: measure(...))()  -> Dated(value, at=time.time(), host=platform.node())
    measured_when(at, host)        -> 'at 14:05 on this machine', 'at 2026-12-02 09:14 on host room-b'
"""
from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from ui.escape import markdown_text

T = TypeVar("T")


@dataclass(frozen=True)
class Dated(Generic[T]):
    value: T
    at: float  # time.time() when the measurement ended
    host: str  # platform.node() of the machine it ran on


def dated(compute: Callable[[], T]) -> Callable[[], Dated[T]]:
    """`compute`, its result stamped with the time and the machine when it returns."""
    return lambda: Dated(compute(), time.time(), platform.node())


def measured_when(at: float, host: str | None = None) -> str:
    """'at 14:05 on this machine' (today), 'at 2026-12-02 09:14 on host room-b' (another day, another machine):
    markdown-safe."""
    moment = time.localtime(at)
    day = "" if time.strftime("%Y-%m-%d", moment) == time.strftime("%Y-%m-%d") else time.strftime("%Y-%m-%d ", moment)
    where = "this machine" if host in (None, platform.node()) else f"host {markdown_text(str(host)[:60])}"
    return f"at {day}{time.strftime('%H:%M', moment)} on {where}"
