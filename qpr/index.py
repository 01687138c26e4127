"""A FAISS index over question vectors whose ids are the corpus' question ids.

``VectorIndex.build`` picks the index type from the corpus size by the FAISS guidelines unless
told: an inverted file ``IVF{nlist},Flat`` needs 4*sqrt(N) <= nlist <= 16*sqrt(N) lists with at
least 39 training points each, so a corpus under about 24k questions gets an exact ``Flat`` index.
Distances are squared Euclidean, the same distance SDML trains with.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np

from qpr.errors import QPRError
from qpr.fsutil import atomic_path

MIN_POINTS_PER_LIST = 39


@dataclass(frozen=True)
class IndexConfig:
    """``factory``: a FAISS factory string (``"Flat"``, ``"IVF2000,Flat"``...) or ``"auto"``;
    ``nprobe``: inverted lists visited per query (paper: 10)."""

    factory: str = "auto"
    nprobe: int = 10


def auto_factory(n: int) -> str:
    """``IVF{4*sqrt(n)},Flat`` where every list gets >= 39 training points, else ``Flat``."""
    nlist = int(round(4 * math.sqrt(n)))
    if nlist < 1 or n < nlist * MIN_POINTS_PER_LIST:
        return "Flat"
    return f"IVF{nlist},Flat"


def _nlist(factory: str) -> int | None:
    match = re.fullmatch(r"IVF(\d+),Flat", factory)
    return int(match.group(1)) if match else None


class VectorIndex:
    """FAISS index + the settings it was built with. Search returns (distances, question ids)."""

    def __init__(self, index: faiss.Index, factory: str, nprobe: int) -> None:
        self.index = index
        self.factory = factory
        self.nprobe = nprobe
        if _nlist(factory) is not None:
            faiss.extract_index_ivf(index).nprobe = nprobe

    @classmethod
    def build(cls, vectors: np.ndarray, ids: np.ndarray, config: IndexConfig = IndexConfig()) -> "VectorIndex":
        """Index ``vectors`` (``(N, d)`` float32) under the int64 ``ids``; trains IVF quantizers."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if vectors.ndim != 2 or len(vectors) != len(ids) or len(ids) == 0:
            raise QPRError(f"need one vector per id and at least one: got {vectors.shape} vectors, {len(ids)} ids")
        factory = auto_factory(len(vectors)) if config.factory == "auto" else config.factory
        nlist = _nlist(factory)
        if nlist is None and factory != "Flat":
            raise QPRError(f"unsupported index {factory!r}: use 'auto', 'Flat' or 'IVF<nlist>,Flat'")
        if nlist is not None and len(vectors) < nlist:
            raise QPRError(f"{factory} needs at least {nlist} vectors to train, got {len(vectors)}; use 'auto' or 'Flat'")
        # IDMap gives the exact index the same add_with_ids interface as IVF.
        index = faiss.index_factory(vectors.shape[1], factory if nlist else "IDMap,Flat")
        if nlist:
            index.train(vectors)
        index.add_with_ids(vectors, ids)
        return cls(index, factory, config.nprobe)

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
        return self.index.search(queries, min(k, len(self)))

    def describe(self) -> str:
        """The label benchmarks use: ``exact`` or e.g. ``IVF2000,Flat/nprobe=10``."""
        return "exact" if self.factory == "Flat" else f"{self.factory}/nprobe={self.nprobe}"

    def settings(self) -> dict:
        return asdict(IndexConfig(self.factory, self.nprobe))

    def save(self, path: Path) -> None:
        with atomic_path(path) as tmp:
            faiss.write_index(self.index, str(tmp))

    @classmethod
    def load(cls, path: Path, factory: str, nprobe: int) -> "VectorIndex":
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as err:
            raise QPRError(f"cannot read FAISS index {path}: {err.args[0].splitlines()[0]}") from err
        return cls(index, factory, nprobe)
