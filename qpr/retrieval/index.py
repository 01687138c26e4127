"""A FAISS index over question vectors whose ids are the corpus' question ids.

``VectorIndex.build`` picks the index type from the corpus size and a memory budget unless told
(``auto_factory``). Measured on Quora-lite with the default encoder (docs/INDEX.md, idle machine,
one query at a time): exact search over 157k questions takes 13 ms (p50), most of a 20 ms budget;
an inverted file loses recall fast on these vectors (the paper's IVF2000 with 10 probes keeps 82%
of the exact top 20, 100 probes 91%; docs/SCALE.md says why); an HNSW graph with M=48 searched
with 512 candidates keeps 99.4% in 2.3 ms and builds in 17 s. So ``auto`` searches exactly up to
``EXACT_UP_TO`` questions, uses ``HNSW48`` (efSearch 512, 768 beyond 500k) up to ``GRAPH_UP_TO`` when its float
vectors and links fit the budget, and beyond an inverted file with an HNSW coarse quantizer,
compressed codes and an exact re-ranking of the shortlist (docs/SCALE.md). Any IVF factory
(``IVF{nlist},Flat``, ``IVF{nlist}_HNSW32,SQ8,RFlat``, ...) or other ``HNSW{M}`` can be asked for
explicitly, with its search-time parameters as one FAISS ``ParameterSpace`` string
(``nprobe=10``, ``efSearch=512``, ``nprobe=256,quantizer_efSearch=512,k_factor_rf=8``), which is
also the index's label in benchmarks. ``VectorIndex.add`` adds questions without a rebuild.
Distances are squared Euclidean, the distance SDML trains with.
"""

from __future__ import annotations

import contextlib
import functools
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from qpr.errors import QPRError
from qpr.fsutil.atomic import atomic_path

EXACT_UP_TO = 50_000
AUTO_GRAPH = "HNSW48"
# Beyond this many questions ``auto`` leaves the graph for a compressed inverted file (docs/SCALE.md).
GRAPH_UP_TO = 2_000_000
# Memory ``auto`` may plan for when not told: the 4 GB the 10M goal allows (issue 22).
DEFAULT_MEMORY_BYTES = 4 * 2**30
# Search-time parameters when none are given, by index type: the paper's 10 probes for an inverted
# file; 512 HNSW candidates, the least measured that kept 99% of the exact top 20 (docs/INDEX.md).
DEFAULT_SEARCH = {"ivf": "nprobe=10", "hnsw": "efSearch=512", "exact": ""}
# The candidates ``auto``'s graph searches with, by corpus size: a larger graph needs more for the
# same recall. Measured (docs/SCALE.md): 512 keeps 0.995 of the exact top 20 at 157k and 0.9875 at
# 1M, where 768 keeps 0.992 with p99 6.2 ms on 2 cores.
GRAPH_SEARCH = ((500_000, "efSearch=512"), (GRAPH_UP_TO, "efSearch=768"))
# What ``auto`` searches its compressed inverted files with (docs/SCALE.md): many probes (the
# vectors' neighbours spread over many cells, docs/INDEX.md), a wide HNSW coarse search, and a
# re-ranking of 8x the asked-for k from the compressed shortlist. Measured at 10M questions
# (16,384 lists, PQ75 re-ranked on SQ8, 2 cores): 0.966 of the exact top 20 with p99 12.4 ms; 128
# probes kept 0.925 (p99 9.2 ms), 512 kept 0.982 (p99 23 ms). 256 probes meet the 10M goal
# (0.95 within 50 ms) with the latency headroom a shared server needs.
COMPRESSED_SEARCH = "nprobe=256,quantizer_efSearch=512,k_factor_rf=8"
# The coarse quantizer's k-means trains on a sample of this many vectors per list (FAISS warns
# below 39), for this many iterations (FAISS's default is 25): on 2 shared cores k-means over 4096
# lists is most of a 1M build, and docs/SCALE.md measures recall with these settings.
TRAIN_PER_LIST = 40
KMEANS_ITERATIONS = 10
# The efSearch an HNSW coarse quantizer files added vectors with (searches keep theirs, e.g. 512).
# Filing is one nearest-centroid search per vector: at 512 it was nearly all of a 10M build's time
# (476 vectors/s). On 200k real 300-d vectors in IVF4096_HNSW32,PQ75,Refine(SQ8), one thread,
# adding at efSearch 512 / 128 / 64 / 16 ran 2.9k / 9.1k / 19.1k / 41.3k vectors/s with recall@10
# 0.9852 / 0.9852 / 0.9852 / 0.9846 at the served search settings: 64 costs no recall.
ADD_EF_SEARCH = 64


@dataclass(frozen=True)
class IndexConfig:
    """``factory``: a FAISS factory string (``"Flat"``, ``"IVF2000,Flat"``, ``"HNSW32"``) or ``"auto"``;
    ``search``: the search-time parameters as one FAISS ``ParameterSpace`` string (``"nprobe=10"``,
    ``"efSearch=512"``, several joined by commas); empty: ``DEFAULT_SEARCH`` for the index type.
    ``memory_bytes``: what ``auto`` may plan the index to occupy in memory (0: ``DEFAULT_MEMORY_BYTES``)."""

    factory: str = "auto"
    search: str = ""
    memory_bytes: int = 0


def ivf_lists(n: int) -> int:
    """Inverted lists for ``n`` vectors: the power of two nearest 4*sqrt(n), the low end of FAISS's
    guideline (4 to 16 sqrt(n)): fewer lists train faster, and these vectors need many probes anyway."""
    return 2 ** max(4, round(math.log2(4 * math.sqrt(n))))


def planned_bytes(factory: str, n: int, dim: int) -> int:
    """Approximate memory of the index ``auto_factory`` may pick, for ``n`` vectors of ``dim``
    float32s: codes and ids per vector (an HNSW graph's level-0 links, 2M int32s, dominate its
    overhead), the coarse centroids of an inverted file."""
    if factory == "Flat":
        return n * (4 * dim + 8)
    if factory.startswith("HNSW"):
        return n * (4 * dim + 8 + 2 * int(factory[4:]) * 4 * 1.1)
    nlist = ivf_lists(n)
    code = {"SQ8,RFlat": dim + 4 * dim, "SQ8": dim}.get(factory.split(",", 1)[1], dim // 4 + dim)
    return int(n * (code + 16) + nlist * 4 * dim * 1.5)


def auto_factory(n: int, memory_bytes: int = 0, dim: int = 300) -> str:
    """The index for ``n`` vectors of ``dim`` floats within ``memory_bytes`` (0: the default):
    exact up to ``EXACT_UP_TO``; the ``AUTO_GRAPH`` up to ``GRAPH_UP_TO`` when it fits; beyond, an
    inverted file with an HNSW coarse quantizer whose lists hold 8-bit codes re-ranked exactly
    (``SQ8,RFlat``: full vectors kept beside the codes), or, when those do not fit, PQ codes
    (d/4 bytes) re-ranked from 8-bit codes (``Refine(SQ8)``). Measurements: docs/SCALE.md."""
    budget = memory_bytes or DEFAULT_MEMORY_BYTES
    if n <= EXACT_UP_TO:
        return "Flat"
    if n <= GRAPH_UP_TO and planned_bytes(AUTO_GRAPH, n, dim) <= budget:
        return AUTO_GRAPH
    coarse = f"IVF{ivf_lists(n)}_HNSW32"
    if planned_bytes(f"{coarse},SQ8,RFlat", n, dim) <= budget:
        return f"{coarse},SQ8,RFlat"
    return f"{coarse},PQ{dim // 4},Refine(SQ8)"


def auto_config(n: int, memory_bytes: int = 0, dim: int = 300) -> IndexConfig:
    """What ``auto`` builds for ``n`` vectors: its factory with the search parameters it is measured with."""
    factory = auto_factory(n, memory_bytes, dim)
    if factory == "Flat":
        return IndexConfig(factory, DEFAULT_SEARCH["exact"])
    if factory == AUTO_GRAPH:
        return IndexConfig(factory, next(search for up_to, search in GRAPH_SEARCH if n <= up_to))
    return IndexConfig(factory, COMPRESSED_SEARCH)


def resolve(config: IndexConfig, n: int, dim: int) -> IndexConfig:
    """``config`` with ``auto`` replaced by what it picks for ``n`` vectors of ``dim``."""
    if config.factory != "auto":
        return config
    picked = auto_config(n, config.memory_bytes, dim)
    return IndexConfig(picked.factory, config.search or picked.search)


def check_config(config: IndexConfig, n: int, dim: int = 300) -> None:
    """QPRError now, before any work, if ``config`` cannot index ``n`` vectors of ``dim``: an
    unknown factory, or search parameters the index type does not take (``build`` would find out
    only after encoding, or a whole training run)."""
    config = resolve(config, n, dim)
    factory = config.factory
    probe = _factory_index(dim, factory)
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
    exact and HNSW indexes get an ids map (the same ``add_with_ids`` interface), and so does an
    inverted file behind an exact re-ranking (``RFlat``, ``Refine(...)``), which numbers its
    vectors itself (``IDMap2``: it also finds a vector by id, for ``vectors``)."""
    unsupported = QPRError(f"unsupported index {factory!r}: use 'auto', 'Flat', an IVF factory such as 'IVF2000,Flat', or 'HNSW<M>'")
    try:
        probe = faiss.index_factory(dim, factory)
    except RuntimeError:
        raise unsupported from None
    kind = index_kind(probe)
    if kind is None:
        raise unsupported
    if kind == "ivf":
        return faiss.index_factory(dim, f"IDMap2,{factory}") if isinstance(probe, faiss.IndexRefine) else probe
    return faiss.index_factory(dim, f"IDMap,{factory}")


@contextlib.contextmanager
def _filing(index: faiss.Index):
    """While vectors are added: an HNSW coarse quantizer searched at ``ADD_EF_SEARCH`` at most,
    its search-time efSearch restored after; any other index as it is."""
    try:
        quantizer = faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)
    except RuntimeError:  # not an inverted file
        quantizer = None
    if not isinstance(quantizer, faiss.IndexHNSW):
        yield
        return
    kept = quantizer.hnsw.efSearch
    quantizer.hnsw.efSearch = min(kept, ADD_EF_SEARCH)
    try:
        yield
    finally:
        quantizer.hnsw.efSearch = kept


class VectorIndex:
    """FAISS index + the settings it was built with. Search returns (distances, question ids)."""

    def __init__(self, index: faiss.Index, factory: str, search: str = "", mapped: tuple[Path, int] | None = None) -> None:
        kind = index_kind(index)
        # (file, inode) when the index is memory-mapped from that file (``load``); None when built here.
        self.mapped = mapped
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
        if kind == "ivf" and not isinstance(index, faiss.IndexIDMap):
            ivf = faiss.extract_index_ivf(index)
            if ivf.direct_map.type == faiss.DirectMap.NoMap:
                # For ``vectors``: an id -> list position table (qids are not 0..n-1, so a hash).
                ivf.set_direct_map_type(faiss.DirectMap.Hashtable)

    @property
    def config(self) -> IndexConfig:
        return IndexConfig(self.factory, self.search_params)

    @classmethod
    def build(cls, vectors: np.ndarray, ids: np.ndarray, config: IndexConfig = IndexConfig(), seed: int = 0) -> "VectorIndex":
        """Index ``vectors`` (``(N, d)`` float32, a memory map will do) under the int64 ``ids``.
        Inverted files train on a seeded sample of ``TRAIN_PER_LIST`` vectors per list."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if vectors.ndim != 2 or len(vectors) != len(ids) or len(ids) == 0:
            raise QPRError(f"need one vector per id and at least one: got {vectors.shape} vectors, {len(ids)} ids")
        config = resolve(config, len(vectors), vectors.shape[1])
        index = _factory_index(vectors.shape[1], config.factory)
        if not index.is_trained:
            ivf = faiss.extract_index_ivf(index)
            ivf.cp.niter = KMEANS_ITERATIONS
            nlist = ivf.nlist
            if len(vectors) < nlist:
                raise QPRError(f"{config.factory} needs at least {nlist} vectors to train, got {len(vectors)}; use 'auto' or 'Flat'")
            rows = np.random.default_rng(seed).choice(len(vectors), min(len(vectors), nlist * TRAIN_PER_LIST), replace=False)
            index.train(np.ascontiguousarray(vectors[np.sort(rows)], dtype=np.float32))
        built = cls(index, config.factory, config.search)
        built.add(vectors, ids)
        return built

    def add(self, vectors: np.ndarray, ids: np.ndarray, chunk: int = 100_000) -> None:
        """Add questions to this index without rebuilding it: an inverted file files them under its
        trained centroids, a graph links them in, an exact index appends them. ``ids`` must be new
        (QPRError names those already indexed, and nothing is added). Reads ``vectors`` in chunks,
        so a memory map of any size will do."""
        if self.mapped:
            raise QPRError("this index is memory-mapped from its bundle and read-only; add to a copy (``copy()``)")
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim or len(vectors) != len(ids):
            raise QPRError(f"need one {self.dim}-d vector per id: got {vectors.shape} vectors, {len(ids)} ids")
        unique, counts = np.unique(ids, return_counts=True)
        repeated = unique[counts > 1]
        known = ids[self._holds(ids)] if len(self) else ids[:0]
        if len(repeated) or len(known):
            raise QPRError(f"question ids must be new and distinct; already indexed: {known.tolist()[:5]}, "
                           f"repeated: {repeated.tolist()[:5]}")
        with _filing(self.index):
            for start in range(0, len(ids), chunk):
                self.index.add_with_ids(np.ascontiguousarray(vectors[start : start + chunk], dtype=np.float32),
                                        ids[start : start + chunk])
        self.__dict__.pop("_ids_by_value", None)  # the id table changed

    def _holds(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` this index holds (a boolean mask)."""
        if isinstance(self.index, faiss.IndexIDMap):
            return np.isin(ids, faiss.vector_to_array(self.index.id_map))
        # A bare inverted file keeps its ids in its lists; its hash table finds one at a time.
        table = faiss.extract_index_ivf(self.index).direct_map
        held = []
        for qid in ids.tolist():
            try:
                table.get(qid)
                held.append(True)
            except RuntimeError:
                held.append(False)
        return np.asarray(held, dtype=bool)

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
        """What a bundle's manifest records to rebuild this index: the factory and search
        parameters it was built with (``auto`` and the memory budget already resolved)."""
        return {"factory": self.factory, "search": self.search_params}

    def copy(self) -> "VectorIndex":
        """An independent copy in memory, which ``add`` may change (this one stays as it is)."""
        if self.mapped:
            return VectorIndex(faiss.read_index(str(self._mapped_file())), self.factory, self.search_params)
        return VectorIndex(faiss.clone_index(self.index), self.factory, self.search_params)

    def _mapped_file(self) -> Path:
        """The file this index is mapped from, if it is still the one mapped (not replaced since)."""
        path, inode = self.mapped
        if not path.is_file() or path.stat().st_ino != inode:
            raise QPRError(f"{path} was replaced since this index was opened from it; load the bundle again")
        return path

    def save(self, path: Path) -> None:
        with atomic_path(path) as tmp:
            if self.mapped:  # the mapped file is this index as written: copy it rather than rewrite it page by page
                shutil.copyfile(self._mapped_file(), tmp)
            else:
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
        # Every index is memory-mapped (``IO_FLAG_MMAP_IFC``: FAISS points the stored codes of
        # flat, graph and refine indexes and an inverted file's lists into the mapped file, zero
        # copy), so a large index is not read whole at startup and its pages are shared with the
        # page cache: at a million questions a graph index opened in 0.1 s instead of 3 s with 1.6 GB
        # less private memory. (``IO_FLAG_MMAP``, which maps only inverted lists, cannot be combined
        # with it, and left a refine index's codes read whole.)
        try:
            index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
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
        return cls(index, factory, search, (Path(path), Path(path).stat().st_ino))
