"""A FAISS index over question vectors whose ids are the corpus' question ids.

``VectorIndex.build`` picks the index type from the corpus size unless told. Measured on
Quora-lite with the default encoder (docs/INDEX.md, idle machine, one query at a time): exact
search over 157k questions takes 13 ms (p50), most of a 20 ms budget; an inverted file loses
recall fast on these vectors (the paper's IVF2000 with 10 probes keeps 82% of the exact top 20,
100 probes 91%); an HNSW graph with M=48 searched with 512 candidates keeps 99.4% in 2.3 ms and
builds in 17 s. So ``auto`` searches exactly up to ``EXACT_UP_TO`` questions (a linear scan,
about 4 ms there by extrapolation) and uses ``HNSW48`` with efSearch 512 beyond. Any IVF factory
(``IVF{nlist},Flat``, ``IVF{nlist}_HNSW32,Flat``, ...) or other ``HNSW{M}`` can be asked for
explicitly, with its search-time parameters as one FAISS ``ParameterSpace`` string
(``nprobe=10``, ``efSearch=512``), which is also the index's label in benchmarks.
Distances are squared Euclidean, the distance SDML trains with.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np

from qpr.errors import QPRError
from qpr.fsutil import atomic_path

EXACT_UP_TO = 50_000
AUTO_GRAPH = "HNSW48"
# Search-time parameters when none are given, by index type: the paper's 10 probes for an inverted
# file; 512 HNSW candidates, the least measured that kept 99% of the exact top 20 (docs/INDEX.md).
DEFAULT_SEARCH = {"ivf": "nprobe=10", "hnsw": "efSearch=512", "exact": ""}


@dataclass(frozen=True)
class IndexConfig:
    """``factory``: a FAISS factory string (``"Flat"``, ``"IVF2000,Flat"``, ``"HNSW32"``) or ``"auto"``;
    ``search``: the search-time parameters as one FAISS ``ParameterSpace`` string (``"nprobe=10"``,
    ``"efSearch=512"``, several joined by commas); empty: ``DEFAULT_SEARCH`` for the index type."""

    factory: str = "auto"
    search: str = ""


def auto_factory(n: int) -> str:
    """``Flat`` up to ``EXACT_UP_TO`` vectors, else ``AUTO_GRAPH`` (module doc)."""
    return "Flat" if n <= EXACT_UP_TO else AUTO_GRAPH


def auto_config(n: int) -> IndexConfig:
    """What ``auto`` builds for ``n`` vectors: its factory with that type's default search parameters."""
    factory = auto_factory(n)
    return IndexConfig(factory, DEFAULT_SEARCH["exact" if factory == "Flat" else "hnsw"])


def check_config(config: IndexConfig, n: int) -> None:
    """QPRError now, before any work, if ``config`` cannot index ``n`` vectors: an unknown
    factory, or search parameters the index type does not take (``build`` would find out only
    after encoding, or a whole training run)."""
    factory = auto_factory(n) if config.factory == "auto" else config.factory
    probe = _factory_index(8, factory)
    search = config.search or DEFAULT_SEARCH[index_kind(probe)]
    try:
        if search:
            faiss.ParameterSpace().set_index_parameters(probe, search)
    except RuntimeError:
        raise QPRError(f"search parameters {search!r} do not apply to a {factory} index "
                       f"(for example: {DEFAULT_SEARCH['ivf']!r} for IVF, {DEFAULT_SEARCH['hnsw']!r} for HNSW)") from None


def index_kind(index: faiss.Index) -> str | None:
    """"ivf", "hnsw" or "exact" for the index types this module serves (read from the FAISS
    object itself, ids map unwrapped), None for any other."""
    if faiss.try_extract_index_ivf(index) is not None:
        return "ivf"
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap) else index
    if isinstance(inner, faiss.IndexHNSW):
        return "hnsw"
    return "exact" if isinstance(inner, faiss.IndexFlat) else None


def _factory_index(dim: int, factory: str) -> faiss.Index:
    """A new FAISS index for ``factory``, with question ids: inverted files carry ids themselves,
    exact and HNSW indexes get an ids map (the same ``add_with_ids`` interface)."""
    unsupported = QPRError(f"unsupported index {factory!r}: use 'auto', 'Flat', an IVF factory such as 'IVF2000,Flat', or 'HNSW<M>'")
    try:
        probe = faiss.index_factory(dim, factory)
    except RuntimeError:
        raise unsupported from None
    kind = index_kind(probe)
    if kind is None:
        raise unsupported
    return probe if kind == "ivf" else faiss.index_factory(dim, f"IDMap,{factory}")


class VectorIndex:
    """FAISS index + the settings it was built with. Search returns (distances, question ids)."""

    def __init__(self, index: faiss.Index, factory: str, search: str = "") -> None:
        kind = index_kind(index)
        if kind is None:
            raise QPRError(f"the FAISS index ({type(index).__name__}) is not one this version serves; rebuild it with `python -m qpr index`")
        self.index = index
        self.factory = factory
        self.kind = kind
        self.search_params = search or DEFAULT_SEARCH[kind]
        if self.search_params:
            try:
                faiss.ParameterSpace().set_index_parameters(index, self.search_params)
            except RuntimeError:
                raise QPRError(f"search parameters {self.search_params!r} do not apply to a {factory} index "
                               f"(for example: {DEFAULT_SEARCH['ivf']!r} for IVF, {DEFAULT_SEARCH['hnsw']!r} for HNSW)") from None
        if kind == "ivf":
            ivf = faiss.extract_index_ivf(index)
            if ivf.direct_map.type == faiss.DirectMap.NoMap:
                # For ``vectors``: an id -> list position table (qids are not 0..n-1, so a hash).
                ivf.set_direct_map_type(faiss.DirectMap.Hashtable)

    @property
    def config(self) -> IndexConfig:
        return IndexConfig(self.factory, self.search_params)

    @classmethod
    def build(cls, vectors: np.ndarray, ids: np.ndarray, config: IndexConfig = IndexConfig()) -> "VectorIndex":
        """Index ``vectors`` (``(N, d)`` float32) under the int64 ``ids``; trains IVF quantizers."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if vectors.ndim != 2 or len(vectors) != len(ids) or len(ids) == 0:
            raise QPRError(f"need one vector per id and at least one: got {vectors.shape} vectors, {len(ids)} ids")
        factory = auto_factory(len(vectors)) if config.factory == "auto" else config.factory
        index = _factory_index(vectors.shape[1], factory)
        if not index.is_trained:
            nlist = faiss.extract_index_ivf(index).nlist
            if len(vectors) < nlist:
                raise QPRError(f"{factory} needs at least {nlist} vectors to train, got {len(vectors)}; use 'auto' or 'Flat'")
            index.train(vectors)
        index.add_with_ids(vectors, ids)
        return cls(index, factory, config.search)

    @property
    def dim(self) -> int:
        return self.index.d

    def __len__(self) -> int:
        return self.index.ntotal

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` squared distances and ids for each row of ``queries``; id -1 pads short lists."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise QPRError(f"query vectors have shape {queries.shape}; this index expects (n, {self.dim})")
        if k < 1:
            raise QPRError(f"k must be at least 1, got {k}")
        if len(queries) > 1:
            return self.index.search(queries, min(k, len(self)))
        # One query (what a user waits for) on one thread: FAISS would split its scan over all
        # threads, and on 2 cores the hand-over cost more than it saved (docs/QUALITY.md, latency).
        # The OpenMP thread count set here belongs to the calling thread only.
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            return self.index.search(queries, min(k, len(self)))
        finally:
            faiss.omp_set_num_threads(threads)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """The indexed vectors of the question ``ids``, as ``(len(ids), dim)`` float32: scoring a
        known question against a query then needs no second encoding of it."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.kind == "ivf":
            try:
                return self.index.reconstruct_batch(ids)
            except RuntimeError as err:
                raise QPRError(f"question ids not in this index: {ids.tolist()[:5]}") from err
        order, stored = self._ids_by_value
        found = np.minimum(np.searchsorted(stored, ids), len(stored) - 1)
        missing = ids[stored[found] != ids]
        if len(missing):
            raise QPRError(f"question ids not in this index: {missing.tolist()[:5]}")
        return faiss.downcast_index(self.index.index).reconstruct_batch(order[found])

    @functools.cached_property
    def _ids_by_value(self) -> tuple[np.ndarray, np.ndarray]:
        # IDMap indexes (exact, HNSW) keep their vectors in insertion order and the ids beside them.
        ids = faiss.vector_to_array(self.index.id_map)
        order = np.argsort(ids, kind="stable")
        return order, ids[order]

    def describe(self) -> str:
        """The label benchmarks use: ``exact``, else the factory and the search parameters, e.g.
        ``IVF2000,Flat/nprobe=10`` or ``HNSW32/efSearch=128``."""
        return "exact" if self.kind == "exact" else f"{self.factory}/{self.search_params}"

    def settings(self) -> dict:
        """What a bundle's manifest records to rebuild this index (``IndexConfig``'s fields)."""
        return asdict(self.config)

    def save(self, path: Path) -> None:
        with atomic_path(path) as tmp:
            faiss.write_index(self.index, str(tmp))

    @classmethod
    def load(cls, path: Path, settings: dict) -> "VectorIndex":
        """Read the index at ``path`` with the manifest's ``settings`` (``settings()``) and check it
        is the kind of index they name; QPRError names what does not fit. Bundles written before
        search strings kept ``nprobe`` and ``ef_search`` apart; the index type decides which applies."""
        where = f"{path}: the manifest's index"
        factory = settings.get("factory") if isinstance(settings, dict) else None
        search = settings.get("search") if isinstance(settings, dict) else None
        if not isinstance(factory, str) or not (search is None or isinstance(search, str)):
            raise QPRError(f"{where} settings must name a factory and search parameters as text, got {settings!r}; "
                           "rebuild the index with `python -m qpr index`")
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as err:
            raise QPRError(f"cannot read FAISS index {path}: {err.args[0].splitlines()[0]}") from err
        try:
            expected = index_kind(_factory_index(index.d, factory))
        except QPRError as err:
            raise QPRError(f"{where} type: {err}; rebuild the index with `python -m qpr index`") from None
        if index_kind(index) != expected:
            raise QPRError(f"{path} holds an {index_kind(index) or 'unknown'} index, but the manifest says {factory!r}; "
                           "rebuild the index with `python -m qpr index`")
        if search is None:
            legacy = {"ivf": f"nprobe={settings.get('nprobe', 10)}", "hnsw": f"efSearch={settings.get('ef_search', 512)}"}
            search = legacy.get(expected, "")
        return cls(index, factory, search)
