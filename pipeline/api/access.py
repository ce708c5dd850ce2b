"""Who may call the API, and how many requests one client may have in the queue.

On a loopback address the API needs no key. Bound to any other address it is off unless TPE_API_KEY is set; with a
key set (on any address) every request carries it, as `Authorization: Bearer KEY` (the openai SDK) or `x-api-key: KEY`
(the anthropic SDK). One client (its key, else its address) holds at most CLIENT_SLOTS requests in the queue at once
(waiting or running), so a client sending 100 requests at once is refused (429, retry-after) past them instead of
standing in front of the room's learners."""
from __future__ import annotations

import hmac
import ipaddress
import os
import threading

from pipeline.api.errors import ApiError

KEY_ENV = "TPE_API_KEY"
SLOTS_ENV = "TPE_API_CLIENT_SLOTS"
CLIENT_SLOTS = 8  # one client's requests in the queue at once (an n = 8 call takes all of them)
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(address: str | None) -> bool:
    """The server's bind address: 'localhost', 127.x.x.x and ::1 are loopback; '', 0.0.0.0, :: (every interface) and
    any other address are not."""
    if not address:
        return False
    if address.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def check_access(bind_address: str | None, headers: dict[str, str], key: str | None = None) -> str:
    """The client's key (or "" on loopback without one), or ApiError: 404 where the API is off, 401 for a missing or
    wrong key. headers: lower-case names. key: TPE_API_KEY's value when None."""
    key = os.environ.get(KEY_ENV, "") if key is None else key
    if not key:
        if is_loopback(bind_address):
            return ""
        raise ApiError(404, f"the API is off: this server listens on {bind_address or 'every address'}, beyond this "
                            f"machine; start it with {KEY_ENV} set to turn the API on with a key.")
    given = headers.get("x-api-key", "")
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if not given and scheme.lower() == "bearer":
        given = token.strip()
    if not given:
        raise ApiError(401, "this server needs its API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'.")
    if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), key.encode("utf-8", "surrogatepass")):
        raise ApiError(401, "the API key is not this server's.")
    return given


class ClientSlots:
    """How many requests each client has in the queue; take(client, n) refuses (429) past the client's slots."""

    def __init__(self, slots: int | None = None):
        self.slots = slots if slots is not None else int(os.environ.get(SLOTS_ENV) or CLIENT_SLOTS)
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, client: str, n: int, retry_after_s: int = 1) -> None:
        with self._lock:
            held = self._held.get(client, 0)
            if held + n > self.slots:
                raise ApiError(429, f"this client already has {held} request{'s' if held != 1 else ''} in the "
                                    f"model's queue; each client may hold {self.slots} at once, so that the others "
                                    "(the room's learners too) keep their turn. Retry after the time retry-after says.",
                               retry_after_s=max(1, retry_after_s))
            self._held[client] = held + n

    def give_back(self, client: str, n: int) -> None:
        with self._lock:
            left = self._held.get(client, 0) - n
            if left > 0:
                self._held[client] = left
            else:
                self._held.pop(client, None)

    def held(self, client: str) -> int:
        with self._lock:
            return self._held.get(client, 0)
