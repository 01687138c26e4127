"""Who may log in (``QPR_AUTH``'s pairs), and how fast wrong passwords are refused.

Every login goes through ``Logins.check``: the page's login form (Gradio calls it as its ``auth``
function) and the HTTP API's Basic credentials (``ui.http_api``). Failed logins are counted per
login name and per client address over the last minute; once either has ``PER_MINUTE`` of them,
further attempts from that name or address are refused without their password being tried, so
guessing is held to ``PER_MINUTE`` a minute per name and per address. A locked name unlocks itself
a minute after its last counted failure. ``ClientAddress`` (a middleware of the app) tells the
check which address a login comes from, since Gradio's ``auth`` is called with the name and
password alone.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from contextvars import ContextVar
from typing import Callable

PER_MINUTE = 10  # failed logins a name or an address may make in a minute before it waits
WINDOW_S = 60.0
CLIENT: ContextVar[str] = ContextVar("qpr_client_address", default="?")


class Logins:
    """The app's login pairs and the failures counted against names and addresses (module doc)."""

    def __init__(self, pairs: list[tuple[str, str]], per_minute: int = PER_MINUTE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.passwords = dict(pairs)
        self.per_minute = per_minute
        self.tried = 0  # passwords compared (a refusal for too many failures compares none)
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, username: str, password: str, address: str | None = None) -> bool:
        """Whether ``username`` / ``password`` is one of the pairs, tried only while neither the
        name nor the address (default: the request's, ``CLIENT``) is over its failures."""
        keys = (f"name:{username}", f"address:{address or CLIENT.get()}")
        now = self.clock()
        with self._lock:
            if any(len(self._recent(key, now)) >= self.per_minute for key in keys):
                return False
        known = self.passwords.get(username)
        self.tried += 1
        good = known is not None and secrets.compare_digest(password.encode(), known.encode())
        if not good:
            with self._lock:
                for key in keys:
                    self._failures.setdefault(key, deque()).append(now)
        return good

    def __call__(self, username: str, password: str) -> bool:
        """``check`` as Gradio's ``auth`` function calls it."""
        return self.check(username, password)

    def _recent(self, key: str, now: float) -> deque[float]:
        failures = self._failures.get(key, deque())
        while failures and failures[0] <= now - WINDOW_S:
            failures.popleft()
        if not failures:
            self._failures.pop(key, None)  # names and addresses that stopped failing are forgotten
        return failures


class ClientAddress:
    """An ASGI middleware that makes each HTTP request's client address ``CLIENT`` while it runs."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = CLIENT.set((scope.get("client") or ("?",))[0])
        try:
            await self.app(scope, receive, send)
        finally:
            CLIENT.reset(token)
