"""Which project each open page works on: ``PageProjects``, keyed by the page's Gradio session.

Gradio sets the request of the event it runs in a context variable before calling any handler
(``gradio.context.LocalContext``, as its own caching does); ``page_id`` reads it, so every tab
acts on its page's project without each handler passing the page along. Outside an event (tests,
commands) there is no page, and the default project applies.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from gradio.context import LocalContext

MAX_PAGES = 10_000  # pages whose project is remembered; beyond, the longest unseen is forgotten


def page_id() -> str | None:
    """The page (Gradio session) whose event is being handled, or None outside an event."""
    request = LocalContext.request.get(None)
    return getattr(request, "session_hash", None) or None


class PageProjects:
    """The project slug each page has open (``default`` for a page that opened none, and
    outside a page); thread-safe."""

    def __init__(self, default: str) -> None:
        self.default = default
        self._pages: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def current(self) -> str:
        """The current page's project."""
        page = page_id()
        with self._lock:
            return self._pages.get(page, self.default) if page else self.default

    def set(self, slug: str) -> None:
        """The current page opens ``slug``; outside a page, ``slug`` becomes the default."""
        page = page_id()
        with self._lock:
            if page is None:
                self.default = slug
                return
            self._pages[page] = slug
            self._pages.move_to_end(page)
            while len(self._pages) > MAX_PAGES:  # pages closed without unloading (a crash, a lost network)
                self._pages.popitem(last=False)

    def forget(self) -> None:
        """Forget the current page (its tab was closed or reloaded)."""
        page = page_id()
        with self._lock:
            self._pages.pop(page, None)

