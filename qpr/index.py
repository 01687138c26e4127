"""A FAISS index over question vectors whose ids are the corpus' question ids.

``VectorIndex.build`` picks the index type from the corpus size unless told. Measured on
Quora-lite with the default encoder (docs/INDEX.md, idle machine, one query at a time): exact
search over 157k questions takes 13 ms (p50), most of a 20 ms budget; an inverted file loses
recall fast on these vectors (the paper's IVF2000 with 10 probes keeps 82% of the exact top 20,
100 probes 91%); an HNSW graph with M=48 searched with 512 candidates keeps 99.4% in 2.3 ms and
builds in 17 s. So ``auto`` searches exactly up to ``EXACT_UP_TO`` questions (a linear scan,
about 4 ms there by extrapolation) and uses ``HNSW48`` with efSearch 512 beyond. Any IVF factory
(``IVF{nlist},Flat``, probed ``nprobe`` lists) or other ``HNSW{M}`` can be asked for explicitly.
Distances are squared Euclidean, the distance SDML trains with.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np

from qpr.errors import QPRError
from qpr.fsutil import atomic_path

EXACT_UP_TO = 50_000
AUTO_GRAPH = "HNSW48"


@dataclass(frozen=True)
class IndexConfig:
    """``factory``: a FAISS factory string (``"Flat"``, ``"IVF2000,Flat"``, ``"HNSW32"``) or ``"auto"``;
    ``nprobe``: inverted lists visited per query (paper: 10); ``ef_search``: HNSW search breadth
    (512: the least measured that kept 99% of the exact top 20 with M 32 or 48)."""

    factory: str = "auto"
    nprobe: int = 10
    ef_search: int = 512


def auto_factory(n: int) -> str:
    """``Flat`` up to ``EXACT_UP_TO`` vectors, else ``AUTO_GRAPH`` (module doc)."""
    return "Flat" if n <= EXACT_UP_TO else AUTO_GRAPH


def _nlist(factory: str) -> int | None:
    match = re.fullmatch(r"IVF(\d+),Flat", factory)
    return int(match.group(1)) if match else None


def _is_hnsw(factory: str) -> bool:
    return re.fullmatch(r"HNSW\d+", factory) is not None


class VectorIndex:
    """FAISS index + the settings it was built with. Search returns (distances, question ids)."""

    def __init__(self, index: faiss.Index, factory: str, nprobe: int, ef_search: int = IndexConfig.ef_search) -> None:
        self.index = index
        self.factory = factory
        self.nprobe = nprobe
        self.ef_search = ef_search
        if _nlist(factory) is not None:
            ivf = faiss.extract_index_ivf(index)
            ivf.nprobe = nprobe
            if ivf.direct_map.type == faiss.DirectMap.NoMap:
                # For ``vectors``: an id -> list position table (qids are not 0..n-1, so a hash).
                ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
        if _is_hnsw(factory):
            faiss.downcast_index(index.index).hnsw.efSearch = ef_search

    @classmethod
    def build(cls, vectors: np.ndarray, ids: np.ndarray, config: IndexConfig = IndexConfig()) -> "VectorIndex":
        """Index ``vectors`` (``(N, d)`` float32) under the int64 ``ids``; trains IVF quantizers."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if vectors.ndim != 2 or len(vectors) != len(ids) or len(ids) == 0:
            raise QPRError(f"need one vector per id and at least one: got {vectors.shape} vectors, {len(ids)} ids")
        factory = auto_factory(len(vectors)) if config.factory == "auto" else config.factory
        nlist = _nlist(factory)
        if nlist is None and factory != "Flat" and not _is_hnsw(factory):
            raise QPRError(f"unsupported index {factory!r}: use 'auto', 'Flat', 'IVF<nlist>,Flat' or 'HNSW<M>'")
        if nlist is not None and len(vectors) < nlist:
            raise QPRError(f"{factory} needs at least {nlist} vectors to train, got {len(vectors)}; use 'auto' or 'Flat'")
        # IDMap gives exact search and HNSW the same add_with_ids interface as IVF.
        index = faiss.index_factory(vectors.shape[1], factory if nlist else f"IDMap,{factory}")
        if nlist:
            index.train(vectors)
        index.add_with_ids(vectors, ids)
        return cls(index, factory, config.nprobe, config.ef_search)

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
        if _nlist(self.factory) is not None:
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
        """The label benchmarks use: ``exact``, e.g. ``IVF2000,Flat/nprobe=10`` or ``HNSW32/efSearch=128``."""
        if self.factory == "Flat":
            return "exact"
        if _is_hnsw(self.factory):
            return f"{self.factory}/efSearch={self.ef_search}"
        return f"{self.factory}/nprobe={self.nprobe}"

    def settings(self) -> dict:
        return asdict(IndexConfig(self.factory, self.nprobe, self.ef_search))

    def save(self, path: Path) -> None:
        with atomic_path(path) as tmp:
            faiss.write_index(self.index, str(tmp))

    @classmethod
    def load(cls, path: Path, factory: str, nprobe: int, ef_search: int = IndexConfig.ef_search) -> "VectorIndex":
        """Read ``path`` and check it is the kind of index ``factory`` names (a bundle's manifest
        says which); QPRError names what does not fit."""
        check_settings(factory, nprobe, ef_search, where=f"{path}: the manifest's index")
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as err:
            raise QPRError(f"cannot read FAISS index {path}: {err.args[0].splitlines()[0]}") from err
        kind = type(faiss.downcast_index(index.index if isinstance(index, faiss.IndexIDMap) else index)).__name__
        nlist = _nlist(factory)
        expected = ("IndexIVFFlat" if nlist is not None else "IndexHNSWFlat" if _is_hnsw(factory)
                    else "IndexFlatL2")
        if kind != expected or (nlist is None) != isinstance(index, faiss.IndexIDMap):
            raise QPRError(f"{path} holds an index of type {kind}, but the manifest says {factory!r}; rebuild the index with "
                           "`python -m qpr index`")
        return cls(index, factory, nprobe, ef_search)


def check_settings(factory: object, nprobe: object, ef_search: object, where: str = "index") -> None:
    """QPRError unless ``factory`` is one ``build`` makes (``Flat``, ``IVF<n>,Flat``, ``HNSW<M>``)
    and ``nprobe`` / ``ef_search`` are positive integers."""
    if not isinstance(factory, str) or not (factory == "Flat" or _nlist(factory) or _is_hnsw(factory)):
        raise QPRError(f"{where} type {factory!r} is unknown; this version builds 'Flat', 'IVF<nlist>,Flat' and "
                       "'HNSW<M>' (rebuild it with `python -m qpr index`)")
    for name, value in (("nprobe", nprobe), ("ef_search", ef_search)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise QPRError(f"{where} setting {name} must be a positive integer, got {value!r}")
