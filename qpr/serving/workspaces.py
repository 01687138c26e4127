"""Several projects served at once: each project's ``ServedModel``, loaded when a page first
opens the project and unloaded, least recently opened first, when the served models together
would pass a memory budget (``QPR_MAX_SERVED_MB``).

A project's served model is its whole serving state: the bundle, its served labels version and
a retrained model waiting for a decision. So a model holding such a candidate, and the projects
named ``pinned`` (the built-in demo, which cannot be loaded again from disk), are never unloaded;
any other project unloaded is loaded again, as it was saved, by the next page that opens it.

The memory of a served model is estimated from what it holds (``estimated_mb``): measuring the
process's memory around a load would count whatever other requests allocated meanwhile.
``bench/workspaces.py`` measures the real cost per project against this estimate.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from qpr.serving.served_model import Served, ServedModel

MB = 1_000_000
# A served model's memory per byte of its corpus frame: the frame, BM25's tokenised copy of the
# questions and its index, the served labels, the cluster lookups. On BANKING77 served by BM25,
# bench/workspaces.py measured 6.9 MB resident per project for a 1.2 MB corpus frame.
CORPUS_COPIES = 6


def estimated_mb(served: Served) -> float:
    """The memory a served model holds, in megabytes: its corpus frames (``CORPUS_COPIES``), its
    vector index and its encoder's parameters."""
    bundle = served.bundle
    size = CORPUS_COPIES * int(bundle.corpus.memory_usage(deep=True).sum())
    if bundle.index is not None:
        size += bundle.index.index.ntotal * bundle.index.index.d * 4  # float32 vectors
    parameters = getattr(bundle.encoder, "parameters", None)
    if callable(parameters):
        size += sum(p.numel() * p.element_size() for p in parameters())
    return size / MB


class Workspaces:
    """The served model of each open project, by slug; thread-safe.

    ``load(slug)`` builds a project's ``ServedModel`` (QPRError for a project that cannot be
    served); ``budget_mb`` bounds the estimated memory of all served models; ``pinned`` are
    never unloaded. ``size`` is how a model's memory is estimated (``estimated_mb`` of what it
    serves now)."""

    def __init__(self, load: Callable[[str], ServedModel], budget_mb: float, pinned: Iterable[str] = (),
                 size: Callable[[ServedModel], float] = lambda model: estimated_mb(model.current())) -> None:
        self._load = load
        self.budget_mb = float(budget_mb)
        self.pinned = frozenset(pinned)
        self._size = size
        self._models: OrderedDict[str, ServedModel] = OrderedDict()  # least recently opened first
        self._lock = threading.Lock()
        self._loading = threading.Lock()  # one load at a time: two pages opening a project load it once

    def get(self, slug: str) -> ServedModel:
        """Project ``slug``'s served model, loaded if it is not served yet (then others may be
        unloaded to stay within the budget)."""
        with self._lock:
            model = self._models.get(slug)
            if model is not None:
                self._models.move_to_end(slug)
                return model
        with self._loading:
            with self._lock:
                model = self._models.get(slug)
            if model is None:
                model = self._load(slug)
            self.put(slug, model)
            return model

    def put(self, slug: str, model: ServedModel) -> None:
        """Serve ``model`` for project ``slug`` (a project's new version replaces the old model),
        as the most recently opened; then unload the least recently opened others past the budget."""
        with self._lock:
            self._models[slug] = model
            self._models.move_to_end(slug)
            self._within_budget(keep=slug)

    def drop(self, slug: str) -> None:
        """Stop serving project ``slug`` (it is loaded again when next opened)."""
        with self._lock:
            self._models.pop(slug, None)

    def loaded(self) -> list[str]:
        """The projects served now, least recently opened first."""
        with self._lock:
            return list(self._models)

    def served_mb(self) -> float:
        """The estimated memory of every served model together."""
        with self._lock:
            return sum(self._size(model) for model in self._models.values())

    def _within_budget(self, keep: str) -> None:
        sizes = {slug: self._size(model) for slug, model in self._models.items()}
        total = sum(sizes.values())
        for slug in list(self._models):  # least recently opened first
            if total <= self.budget_mb:
                return
            if slug == keep or slug in self.pinned or self._models[slug].candidate() is not None:
                continue  # the page opening it needs it; the demo cannot be reloaded; a decision is pending
            del self._models[slug]
            total -= sizes[slug]
