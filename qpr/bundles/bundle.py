"""A bundle: the one directory that serving needs, written atomically and validated on load.

Layout::

    manifest.json   format version, bundle version, system, configs, data fingerprint, metrics, history
    vocab.json      the vocabulary (``qpr.model.text``)
    model.safetensors  encoder weights (state dict; older bundles: encoder.pt, still read)
    index.faiss     FAISS index whose ids are the corpus' qids
    corpus.arrow    qid, question, cluster, split: an Arrow file, memory-mapped on load
                    (``qpr.data.corpus_file``; older bundles: corpus.parquet, still read)
    README.md       the model card, config.json the config, for the Hugging Face Hub (``qpr.bundles.card``)
                    (a bundle with an encoder)
    bm25/           the corpus' BM25 index (bm25s arrays), memory-mapped on load; derived from the
                    corpus, so a bundle without it (older ones) or with a damaged one builds it anew
    teacher.npy     an asymmetric bundle's teacher (MiniLM) vectors of the corpus, row for row,
                    memory-mapped on load (manifest ``asymmetric``: the teacher and its weight)

An *asymmetric* bundle (``Bundle.asymmetric``, built by ``with_teacher``; ``qpr rebase
--asymmetric``) searches with its fast encoder's vectors of a query against the corpus' vectors by
both its encoder and the teacher (``qpr.retrieval.asymmetric``): its index holds the two side by
side, ``encode`` gives the query side, and each question added later is encoded by the teacher
too (``with_questions``; the benchmark extra must be installed where a bundle grows).

``version`` (creation time + a digest of the weights) is what annotation judgments refer to.

``system`` (in the manifest) names the encoder, a system of ``qpr.systems.registry``, which says
what it writes, reads and records: ``cnn-sdml`` or ``lstm`` (a ``QuestionEncoder`` with its
vocabulary, the layout above; bundles from before the field are these), or a seed system
(``qpr.systems.seed_encoders``: film, idf-embed, fcrr, convrr), which has no vocabulary and keeps its
encoder in ``encoder.npz`` (and FCRR / ConvRR their weights in ``model.safetensors``), or the optional
transformer backend (``qpr.systems.transformer``: system ``transformer``, its sentence-transformers model
in the folder ``transformer/``). Either way ``Bundle.encode`` maps texts to the vectors the index holds.
The manifest and the folder are checked by ``qpr.bundles.manifest``.

A *lexical* bundle (``Bundle.lexical``) is a corpus with no encoder yet, served by BM25 alone:
a project started from bare questions, or one whose encoder is still training. It holds only
``manifest.json`` (``"lexical": true``, version = creation time + the corpus fingerprint),
``corpus.arrow`` and ``bm25/``; ``encoder``, ``vocab`` and ``index`` are None.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
import pandas as pd

from qpr.bundles.card import write_card
from qpr.bundles.manifest import (BM25_FOLDER, LEGACY_FILES, LEXICAL, LEXICAL_FILES, REBUILD, TEACHER_FILE, Manifest, check_target,
                                  is_bundle, manifest_system)
from qpr.training.teacher import TEACHER, minilm_vectors
from qpr.data.corpus import COLUMNS, check_corpus, fingerprint
from qpr.data.corpus_file import CORPUS_FILE, corpus_path, read_corpus_file, write_corpus_file
from qpr.model.encoder import QuestionEncoder, encode_texts
from qpr.errors import QPRError
from qpr.fsutil.atomic import atomic_path
from qpr.fsutil.leftovers import recover
from qpr.retrieval.asymmetric import WeightChoice, corpus_side, query_side
from qpr.retrieval.base import Retriever
from qpr.retrieval.dense import DenseRetriever
from qpr.retrieval.hybrid import fused_retriever
from qpr.retrieval.index import IndexConfig, VectorIndex
from qpr.retrieval.lexical import BM25Retriever
from qpr.model.text import Vocabulary
from qpr.systems.registry import system_named, system_of


class TextEncoder(Protocol):
    """What an encoder without a vocabulary offers a bundle (``qpr.systems.seed_encoders``,
    ``qpr.systems.transformer``); its system's ``load`` (``qpr.systems.registry``) reads it back."""

    system: str  # its name in the manifest
    output_dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 rows, one per text."""

    def settings(self) -> dict:
        """What the manifest records as ``encoder_config`` (and ``load`` is given back)."""

    def save(self, folder: Path) -> None:
        """Write its files into the bundle folder being written."""


@dataclass
class Bundle:
    """Encoder + vocabulary + index + corpus, and the manifest that describes them.

    ``encoder`` is a ``QuestionEncoder`` with its ``vocab``, or a seed system's encoder
    (``qpr.systems.seed_encoders``) with ``vocab`` None; a lexical bundle has no encoder, vocabulary or
    index (module doc)."""

    encoder: QuestionEncoder | TextEncoder | None
    vocab: Vocabulary | None
    index: VectorIndex | None
    corpus: pd.DataFrame
    manifest: Manifest
    # BM25 over ``corpus`` read by ``load`` (the saved index) or built already (``with_bm25``).
    prebuilt_bm25: BM25Retriever | None = field(default=None, repr=False, compare=False)
    # An asymmetric bundle's teacher vectors of ``corpus``, row for row (module doc); None: symmetric.
    teacher_vectors: np.ndarray | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def bm25(self) -> BM25Retriever:
        """BM25 over the corpus: the index saved with the bundle, or one built before for its
        corpus, else built here, once per bundle."""
        return self.prebuilt_bm25 or BM25Retriever(self.corpus)

    def _same_corpus(self) -> BM25Retriever | None:
        """The BM25 index a bundle over this same corpus can reuse, if one was read or built."""
        return self.__dict__.get("bm25") or self.prebuilt_bm25

    def with_bm25(self, bm25: BM25Retriever) -> "Bundle":
        """The same bundle with ``bm25``, a BM25 retriever built over this corpus (row for row: its
        index numbers the rows), to serve and save instead of building another; one over other
        rows is not taken."""
        same = len(bm25.corpus) == len(self.corpus) and (bm25.corpus["qid"].to_numpy() == self.corpus["qid"].to_numpy()).all()
        return Bundle(self.encoder, self.vocab, self.index, self.corpus, self.manifest, bm25 if same else self._same_corpus(),
                      self.teacher_vectors)

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def system(self) -> str:
        """The system the encoder is (module doc): ``LEXICAL`` for a bundle without one."""
        return LEXICAL if self.lexical else self.manifest.system or system_of(self.encoder)

    @property
    def lexical(self) -> bool:
        """Whether this bundle has no encoder (served by BM25 alone)."""
        return self.encoder is None

    @classmethod
    def lexical_of(cls, corpus: pd.DataFrame, data: str = "") -> "Bundle":
        """A bundle of ``corpus`` with no encoder (module doc); ``data`` names its source."""
        corpus = corpus[COLUMNS].reset_index(drop=True)
        created = datetime.now(timezone.utc)
        # The source named too: two projects made from one file in the same second stay apart
        # (a bundle version belongs to one project's judgments).
        digest = hashlib.sha256(f"{fingerprint(corpus)}\n{data}".encode()).hexdigest()[:8]
        manifest = Manifest(version=f"{created:%Y%m%dT%H%M%SZ}-lex{digest}", data_fingerprint=fingerprint(corpus),
                            created=created.isoformat(timespec="seconds"), lexical=True, data=data, corpus_size=len(corpus))
        return cls(None, None, None, corpus, manifest)

    @property
    def asymmetric(self) -> float | None:
        """The teacher's weight in an asymmetric bundle's scores (module doc); None for a symmetric one."""
        return None if self.manifest.asymmetric is None else self.manifest.asymmetric["weight"]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32 search vectors of ``texts``: for a symmetric bundle those
        its index holds for the corpus; for an asymmetric one the query side (module doc)."""
        vectors = encode_with(self.encoder, self.vocab, texts)
        return vectors if self.asymmetric is None else query_side(vectors, self.asymmetric)

    def _corpus_vectors(self, texts: Sequence[str], teacher: np.ndarray | None) -> np.ndarray:
        """The index rows of the corpus questions ``texts`` (``teacher``: their teacher vectors, row for row)."""
        vectors = encode_with(self.encoder, self.vocab, texts)
        return vectors if self.asymmetric is None else corpus_side(vectors, teacher, self.asymmetric)

    def with_teacher(self, teacher: np.ndarray, choice: WeightChoice, student: np.ndarray | None = None) -> "Bundle":
        """The asymmetric bundle of this one (module doc): ``teacher``, MiniLM's unit vectors of the
        corpus (row for row), beside the encoder's, weighted as ``choice`` chose
        (``qpr.retrieval.asymmetric.choose_weight``); re-indexed with the same index settings
        (``student``: the encoder's vectors of the corpus when computed already; None: encoded here).
        QPRError if the encoder's vectors are not MiniLM's width or ``teacher`` not one per question."""
        if len(teacher) != len(self.corpus):
            raise QPRError(f"{len(teacher):,} teacher vectors for a corpus of {len(self.corpus):,} questions: one per question")
        teacher = np.ascontiguousarray(teacher, dtype=np.float32)
        if student is None:
            student = encode_with(self.encoder, self.vocab, self.corpus["question"].tolist())
        vectors = corpus_side(student, teacher, choice.weight)
        index = VectorIndex.build(vectors, self.corpus["qid"].to_numpy(), self.index.config)
        manifest = replace(self.manifest, asymmetric={"teacher": TEACHER, "weight": choice.weight, "choice": choice.to_dict()},
                           index=_index_entry(index))
        return Bundle(self.encoder, self.vocab, index, self.corpus, manifest, self._same_corpus(), teacher)

    def dense_retriever(self) -> DenseRetriever:
        """This bundle's encoder over its index and corpus, named by its system (a lexical bundle
        has none to search with)."""
        return DenseRetriever(self.encode, self.index, self.corpus, system_of(self.encoder))

    @classmethod
    def create(
        cls,
        encoder: QuestionEncoder,
        vocab: Vocabulary,
        corpus: pd.DataFrame,
        index_config: IndexConfig = IndexConfig(),
        train_info: dict | None = None,
        metrics: dict | None = None,
        vectors: np.ndarray | None = None,
    ) -> "Bundle":
        """Encode every corpus question, build the index, and describe it all in a manifest.

        ``vectors``: the corpus' vectors by ``encoder``, row for row, when they were computed
        already (a large corpus encoded in parts, read as a memory map); None: encoded here."""
        corpus = corpus[COLUMNS].reset_index(drop=True)
        if vectors is None:
            vectors = encode_with(encoder, vocab, corpus["question"].tolist())
        elif len(vectors) != len(corpus):
            raise QPRError(f"{len(vectors)} vectors given for {len(corpus)} corpus questions")
        index = VectorIndex.build(vectors, corpus["qid"].to_numpy(), index_config)
        created = datetime.now(timezone.utc)
        system = system_named(system_of(encoder))
        described, state = system.describe(encoder, vocab, vectors)
        manifest = Manifest(version=f"{created:%Y%m%dT%H%M%SZ}-{hashlib.sha256(state).hexdigest()[:8]}",
                            data_fingerprint=fingerprint(corpus), created=created.isoformat(timespec="seconds"),
                            system=system.name, **described, index=_index_entry(index), corpus_size=len(corpus),
                            training=train_info or {}, metrics=metrics or {})
        return cls(encoder, vocab, index, corpus, manifest)

    def with_index(self, index_config: IndexConfig) -> "Bundle":
        """The same bundle re-indexed with other settings (new index, same encoder and corpus)."""
        vectors = self._corpus_vectors(self.corpus["question"].tolist(), self.teacher_vectors)
        index = VectorIndex.build(vectors, self.corpus["qid"].to_numpy(), index_config)
        manifest = replace(self.manifest, index=_index_entry(index))
        return Bundle(self.encoder, self.vocab, index, self.corpus, manifest, self._same_corpus(), self.teacher_vectors)

    def with_questions(self, questions: pd.DataFrame, source: str = "new questions") -> "Bundle":
        """The bundle with ``questions`` (corpus rows: qid, question, cluster[, split]) added to its
        corpus and index without a rebuild: only they are encoded, and the index files them under
        its trained structure (``VectorIndex.add``). This bundle is left as it was (its index is
        copied first, so a served copy keeps answering meanwhile). An asymmetric bundle encodes them
        with the teacher too (the benchmark extra). QPRError names bad rows or qids the corpus
        already has."""
        new = check_corpus(questions, source)
        known = new["qid"][new["qid"].isin(self.corpus["qid"])]
        if len(known):
            raise QPRError(f"{source}: qids already in the bundle's corpus: {known.tolist()[:5]}")
        texts = new["question"].tolist()
        teacher = None if self.asymmetric is None else minilm_vectors(texts)
        index = self.index.copy()
        index.add(self._corpus_vectors(texts, teacher), new["qid"].to_numpy())
        corpus = pd.concat([self.corpus, new], ignore_index=True)
        manifest = replace(self.manifest, index=_index_entry(index), data_fingerprint=fingerprint(corpus), corpus_size=len(corpus),
                           added_questions=(self.manifest.added_questions or 0) + len(new))
        return Bundle(self.encoder, self.vocab, index, corpus, manifest,
                      teacher_vectors=None if teacher is None else np.concatenate([self.teacher_vectors, teacher]))

    def with_manifest(self, **entries) -> "Bundle":
        """The same bundle (encoder, index, corpus) whose manifest records ``entries`` besides what
        it recorded (``Manifest``'s fields); this bundle's manifest is left as it was."""
        return Bundle(self.encoder, self.vocab, self.index, self.corpus, replace(self.manifest, **entries), self._same_corpus(),
                      self.teacher_vectors)

    def with_fusion(self, fusion: dict) -> "Bundle":
        """The same bundle carrying a fitted hybrid scorer (``qpr.retrieval.hybrid.Fusion.to_dict()``)."""
        return self.with_manifest(fusion=fusion)

    def with_card(self, **card) -> "Bundle":
        """The same bundle whose model card (``qpr.bundles.card``) says ``card``: ``license`` (a Hub
        license id), ``datasets`` (Hub data set ids), ``name``, ``credit`` (markdown)."""
        return self.with_manifest(card=(self.manifest.card or {}) | card)

    def save(self, path: str | Path) -> Path:
        """Write the bundle to ``path`` atomically: after a crash or kill at any instant, ``path``
        holds the old bundle or the new one (``qpr.fsutil.atomic.atomic_path``; a missing bundle after a
        kill between the swap's two renames is completed by ``load``). ``path`` must be new or a
        bundle (``check_target``): nothing else is ever moved or replaced."""
        path = Path(path)
        check_target(path)
        with atomic_path(path, directory=True, replaceable=is_bundle, what="bundle") as tmp:
            if not self.lexical:  # a lexical bundle is a corpus: no model to describe on the Hub
                system_named(self.system).save(self.encoder, self.vocab, tmp)
                self.index.save(tmp / "index.faiss")
                if self.teacher_vectors is not None:
                    np.save(tmp / TEACHER_FILE, np.asarray(self.teacher_vectors))
                write_card(tmp, self.manifest)
            write_corpus_file(self.corpus, tmp / CORPUS_FILE)
            self.bm25.save(tmp / BM25_FOLDER)
            # The manifest goes last: a directory with a manifest was completely written.
            replace(self.manifest, corpus_sha256=_file_sha256(tmp / CORPUS_FILE)).save(tmp)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Bundle":
        """Load and cross-check a bundle; raises QPRError naming exactly what is missing or wrong.

        A bundle whose writer was killed in the middle of replacing it is first completed
        (``qpr.fsutil.leftovers.recover``), so a served app restarts on the old or the new bundle."""
        path = Path(path)
        if not path.exists():
            recover(path)
        if not path.is_dir():
            raise QPRError(f"{path}: no bundle directory there (train one with `python -m qpr train`)")
        name = manifest_system(path)
        system = None if name == LEXICAL else system_named(name, f"{path}/manifest.json: ")
        files, legacy = (LEXICAL_FILES, LEGACY_FILES) if system is None else (system.files, LEGACY_FILES | system.legacy)
        missing = [file for file in files if not any((path / name).is_file() for name in (file, *legacy.get(file, ())))]
        if missing:
            raise QPRError(f"{path}: incomplete bundle, missing {', '.join(missing)}")
        manifest = Manifest.load(path)
        if system is None:
            file = corpus_path(path)
            corpus = read_corpus_file(file, REBUILD)
            if not _corpus_matches(file, corpus, manifest):
                raise QPRError(f"{path}: {file.name} is not the corpus the manifest was built on (fingerprint "
                               f"differs); {REBUILD}")
            return cls(None, None, None, corpus, manifest, BM25Retriever.load(path / BM25_FOLDER, corpus))
        encoder, vocab, output_dim = system.load(path, manifest)
        return cls._checked(path, encoder, vocab, manifest, output_dim)

    @classmethod
    def _checked(cls, path: Path, encoder, vocab: Vocabulary | None, manifest: Manifest, output_dim: int) -> "Bundle":
        """The bundle at ``path`` once its index and corpus agree with the encoder and the manifest."""
        index = VectorIndex.load(path / "index.faiss", manifest.index)
        file = corpus_path(path)
        corpus = read_corpus_file(file, REBUILD)
        problems, teacher = [], None
        if manifest.asymmetric is not None:  # the index holds the encoder's and the teacher's vectors side by side
            output_dim *= 2
            teacher = _teacher_file(path)
            if teacher is None or teacher.shape != (len(corpus), output_dim // 2):
                problems.append(f"{TEACHER_FILE} does not hold one {output_dim // 2}-d teacher vector per corpus question")
        if index.dim != output_dim:
            problems.append(f"index vectors have {index.dim} dimensions, the encoder makes {output_dim}")
        if len(index) != len(corpus):
            problems.append(f"index holds {len(index)} vectors for {len(corpus)} corpus questions")
        if not _corpus_matches(file, corpus, manifest):
            problems.append(f"{file.name} is not the corpus the manifest was built on (fingerprint differs)")
        if problems:
            raise QPRError(f"{path}: inconsistent bundle: " + "; ".join(problems) + ". Rebuild the index with `python -m qpr index`.")
        return cls(encoder, vocab, index, corpus, manifest, BM25Retriever.load(path / BM25_FOLDER, corpus), teacher)


def _teacher_file(path: Path) -> np.ndarray | None:
    """An asymmetric bundle's teacher vectors, memory-mapped; None if the file is missing or unreadable."""
    try:
        return np.load(path / TEACHER_FILE, mmap_mode="r")
    except (OSError, ValueError):
        return None


def encode_with(encoder, vocab: Vocabulary | None, texts: Sequence[str]) -> np.ndarray:
    """``encoder``'s float32 vectors of ``texts`` (its ``vocab`` for a ``QuestionEncoder``), one row each."""
    if isinstance(encoder, QuestionEncoder):
        return encode_texts(encoder, vocab, list(texts))
    return np.ascontiguousarray(encoder.encode(list(texts)), dtype=np.float32)


def _index_entry(index: VectorIndex) -> dict:
    """What the manifest records of ``index``: its settings, size and width."""
    return index.settings() | {"ntotal": len(index), "dim": index.dim}


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _corpus_matches(file: Path, corpus: pd.DataFrame, manifest: Manifest) -> bool:
    """Whether ``corpus``, read from ``file``, is the corpus ``manifest`` was written with: by the
    file's SHA-256 where the manifest records it (every bundle saved since it does; the content
    fingerprint took 20 s of a start at ten million questions, the file's hash under one), else by
    the content fingerprint."""
    if isinstance(manifest.corpus_sha256, str):
        return _file_sha256(file) == manifest.corpus_sha256
    return fingerprint(corpus) == manifest.data_fingerprint


def serving_retriever(bundle: Bundle, bm25: BM25Retriever | None = None) -> Retriever:
    """What a bundle answers queries with: the hybrid when it carries a fitted fusion (measured
    better than either part: docs/QUALITY.md; or the rank fusion of a general bundle,
    docs/OUT_OF_DOMAIN.md), else the encoder alone; BM25 for a lexical bundle (no encoder yet)."""
    if bundle.lexical:
        return bm25 or bundle.bm25
    fusion = bundle.manifest.fusion
    return bundle.dense_retriever() if fusion is None else fused_retriever(bundle.dense_retriever(), fusion, bm25)
