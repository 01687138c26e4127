"""A bundle: the one directory that serving needs, written atomically and validated on load.

Layout::

    manifest.json   format version, bundle version, system, configs, data fingerprint, metrics, history
    vocab.json      the vocabulary (``qpr.model.text``)
    encoder.pt      encoder weights (state dict)
    index.faiss     FAISS index whose ids are the corpus' qids
    corpus.parquet  qid, question, cluster, split

``version`` (creation time + a digest of the weights) is what annotation judgments refer to.

``system`` (in the manifest) names the encoder: ``cnn-sdml`` or ``lstm`` (a ``QuestionEncoder``
with its vocabulary, the layout above; bundles from before the field are these), or a seed system
(``qpr.systems.seed_encoders``: film, idf-embed, fcrr, convrr), which has no vocabulary and keeps its
encoder in ``encoder.npz`` (and FCRR / ConvRR their weights in ``encoder.pt``), or the optional
transformer backend (``qpr.systems.transformer``: system ``transformer``, its sentence-transformers model
in the folder ``transformer/``). Either way ``Bundle.encode`` maps texts to the vectors the index holds.

A *lexical* bundle (``Bundle.lexical``) is a corpus with no encoder yet, served by BM25 alone:
a project started from bare questions, or one whose encoder is still training. It holds only
``manifest.json`` (``"lexical": true``, version = creation time + the corpus fingerprint) and
``corpus.parquet``; ``encoder``, ``vocab`` and ``index`` are None.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import zipfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol, Sequence

import faiss
import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from qpr.data.corpus import COLUMNS, check_corpus, fingerprint
from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_texts
from qpr.errors import QPRError, one_line
from qpr.fsutil.atomic import atomic_path, check_writable
from qpr.fsutil.leftovers import recover
from qpr.retrieval.dense import DenseRetriever
from qpr.retrieval.index import IndexConfig, VectorIndex
from qpr.model.text import Vocabulary
from qpr.systems.seed_encoders import files_of, load_encoder
from qpr.systems.transformer import MODEL as TRANSFORMER_MODEL

FORMAT_VERSION = 1
FILES = ("manifest.json", "vocab.json", "encoder.pt", "index.faiss", "corpus.parquet")
SEED_FILES = ("manifest.json", "index.faiss", "corpus.parquet")  # + the seed encoder's own (qpr.systems.seed_encoders.files_of)
NEURAL_SYSTEMS = ("cnn-sdml", "lstm")
LEXICAL = "bm25"  # the system of a lexical bundle
LEXICAL_FILES = ("manifest.json", "corpus.parquet")


class TextEncoder(Protocol):
    """What a seed system's encoder offers a bundle (``qpr.systems.seed_encoders``)."""

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
    manifest: dict = field(default_factory=dict)

    @property
    def version(self) -> str:
        return self.manifest["version"]

    @property
    def system(self) -> str:
        """The system the encoder is (module doc): ``LEXICAL`` for a bundle without one."""
        return LEXICAL if self.lexical else self.manifest.get("system") or system_of(self.encoder)

    @property
    def lexical(self) -> bool:
        """Whether this bundle has no encoder (served by BM25 alone)."""
        return self.encoder is None

    @classmethod
    def lexical_of(cls, corpus: pd.DataFrame, data: str = "") -> "Bundle":
        """A bundle of ``corpus`` with no encoder (module doc); ``data`` names its source."""
        corpus = corpus[COLUMNS].reset_index(drop=True)
        created = datetime.now(timezone.utc)
        manifest = {
            "format_version": FORMAT_VERSION,
            "version": f"{created:%Y%m%dT%H%M%SZ}-lex{fingerprint(corpus)[:8]}",
            "created": created.isoformat(timespec="seconds"),
            "lexical": True,
            "data": data,
            "data_fingerprint": fingerprint(corpus),
            "corpus_size": len(corpus),
            "training": {},
            "metrics": {},
        }
        return cls(None, None, None, corpus, manifest)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32 vectors of ``texts``, as the index holds the corpus'."""
        return _encode(self.encoder, self.vocab, texts)

    def dense_retriever(self) -> DenseRetriever:
        """This bundle's encoder over its index and corpus (a lexical bundle has none to search with)."""
        return DenseRetriever(self.encode, self.index, self.corpus)

    @classmethod
    def create(
        cls,
        encoder: QuestionEncoder,
        vocab: Vocabulary,
        corpus: pd.DataFrame,
        index_config: IndexConfig = IndexConfig(),
        train_info: dict | None = None,
        metrics: dict | None = None,
    ) -> "Bundle":
        """Encode every corpus question, build the index, and describe it all in a manifest."""
        corpus = corpus[COLUMNS].reset_index(drop=True)
        vectors = _encode(encoder, vocab, corpus["question"].tolist())
        index = VectorIndex.build(vectors, corpus["qid"].to_numpy(), index_config)
        created = datetime.now(timezone.utc)
        if isinstance(encoder, QuestionEncoder):
            weights = io.BytesIO()
            torch.save(encoder.state_dict(), weights)
            described = {"text_config": asdict(vocab.config), "encoder_config": encoder.config.to_dict(),
                         "vocab_rows": encoder.vocab_rows}
        else:
            weights = io.BytesIO(vectors.tobytes())  # the corpus' vectors stand for the encoder's state
            described = {"encoder_config": encoder.settings()}
        manifest = {
            "format_version": FORMAT_VERSION,
            "version": f"{created:%Y%m%dT%H%M%SZ}-{hashlib.sha256(weights.getvalue()).hexdigest()[:8]}",
            "created": created.isoformat(timespec="seconds"),
            "system": system_of(encoder),
            **described,
            "index": index.settings() | {"ntotal": len(index), "dim": index.dim},
            "data_fingerprint": fingerprint(corpus),
            "corpus_size": len(corpus),
            "training": train_info or {},
            "metrics": metrics or {},
        }
        return cls(encoder, vocab, index, corpus, manifest)

    def with_index(self, index_config: IndexConfig) -> "Bundle":
        """The same bundle re-indexed with other settings (new index, same encoder and corpus)."""
        vectors = self.encode(self.corpus["question"].tolist())
        index = VectorIndex.build(vectors, self.corpus["qid"].to_numpy(), index_config)
        manifest = self.manifest | {"index": index.settings() | {"ntotal": len(index), "dim": index.dim}}
        return Bundle(self.encoder, self.vocab, index, self.corpus, manifest)

    def with_questions(self, questions: pd.DataFrame, source: str = "new questions") -> "Bundle":
        """The bundle with ``questions`` (corpus rows: qid, question, cluster[, split]) added to its
        corpus and index without a rebuild: only they are encoded, and the index files them under
        its trained structure (``VectorIndex.add``). This bundle is left as it was (its index is
        copied first, so a served copy keeps answering meanwhile). QPRError names bad rows or qids
        the corpus already has."""
        new = check_corpus(questions, source)
        known = new["qid"][new["qid"].isin(self.corpus["qid"])]
        if len(known):
            raise QPRError(f"{source}: qids already in the bundle's corpus: {known.tolist()[:5]}")
        index = VectorIndex(faiss.clone_index(self.index.index), self.index.factory, self.index.search_params)
        index.add(self.encode(new["question"].tolist()), new["qid"].to_numpy())
        corpus = pd.concat([self.corpus, new], ignore_index=True)
        manifest = self.manifest | {
            "index": index.settings() | {"ntotal": len(index), "dim": index.dim},
            "data_fingerprint": fingerprint(corpus), "corpus_size": len(corpus),
            "added_questions": self.manifest.get("added_questions", 0) + len(new),
        }
        return Bundle(self.encoder, self.vocab, index, corpus, manifest)

    def with_fusion(self, fusion: dict) -> "Bundle":
        """The same bundle carrying a fitted hybrid scorer (``qpr.retrieval.hybrid.Fusion.to_dict()``)."""
        return Bundle(self.encoder, self.vocab, self.index, self.corpus, self.manifest | {"fusion": fusion})

    def save(self, path: str | Path) -> Path:
        """Write the bundle to ``path`` atomically: after a crash or kill at any instant, ``path``
        holds the old bundle or the new one (``qpr.fsutil.atomic.atomic_path``; a missing bundle after a
        kill between the swap's two renames is completed by ``load``). ``path`` must be new or a
        bundle (``check_target``): nothing else is ever moved or replaced."""
        path = Path(path)
        check_target(path)
        with atomic_path(path, directory=True, replaceable=is_bundle, what="bundle") as tmp:
            if isinstance(self.encoder, QuestionEncoder):
                self.vocab.save(tmp / "vocab.json")
                torch.save(self.encoder.state_dict(), tmp / "encoder.pt")
            elif not self.lexical:
                self.encoder.save(tmp)
            if not self.lexical:
                self.index.save(tmp / "index.faiss")
            self.corpus.to_parquet(tmp / "corpus.parquet", index=False)
            # The manifest goes last: a directory with a manifest was completely written.
            (tmp / "manifest.json").write_text(json.dumps(self.manifest, indent=2, ensure_ascii=False))
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
        system = _manifest_system(path)
        missing = [name for name in bundle_files(system) if not (path / name).is_file()]
        if missing:
            raise QPRError(f"{path}: incomplete bundle, missing {', '.join(missing)}")
        manifest = read_manifest(path)
        if system == LEXICAL:
            corpus = _read_corpus(path / "corpus.parquet")
            if fingerprint(corpus) != manifest["data_fingerprint"]:
                raise QPRError(f"{path}: corpus.parquet is not the corpus the manifest was built on (fingerprint "
                               f"differs); {REBUILD}")
            return cls(None, None, None, corpus, manifest)
        if system not in NEURAL_SYSTEMS:
            encoder = load_encoder(system, path, manifest["encoder_config"])
            return cls._checked(path, encoder, None, manifest, encoder.output_dim)
        vocab = Vocabulary.load(path / "vocab.json")
        try:
            encoder_config = EncoderConfig(**manifest["encoder_config"])
        except (TypeError, ValueError) as err:
            raise QPRError(f"{path}/manifest.json: encoder_config is not one this version reads ({one_line(err)}); {REBUILD}") from err
        if vocab.size != manifest["vocab_rows"]:
            raise QPRError(f"{path}: vocab.json gives {vocab.size} embedding rows, the manifest {manifest['vocab_rows']}")
        encoder = QuestionEncoder(vocab.size, encoder_config)
        if not zipfile.is_zipfile(path / "encoder.pt"):
            raise QPRError(f"{path}/encoder.pt is not a PyTorch weights file (not a zip archive); {REBUILD}")
        try:
            weights = torch.load(path / "encoder.pt", weights_only=True)
        except (RuntimeError, OSError, EOFError, ValueError, KeyError, IndexError, TypeError, AttributeError,
                pickle.UnpicklingError) as err:
            raise QPRError(f"{path}/encoder.pt is not a readable PyTorch weights file ({one_line(err)}); {REBUILD}") from err
        if not isinstance(weights, dict):
            raise QPRError(f"{path}/encoder.pt holds a {type(weights).__name__}, not encoder weights; {REBUILD}")
        try:
            encoder.load_state_dict(weights)
        except (RuntimeError, TypeError, AttributeError) as err:
            raise QPRError(f"{path}/encoder.pt does not match the manifest's encoder config: {one_line(err)}") from err
        encoder.eval()
        return cls._checked(path, encoder, vocab, manifest, encoder_config.output_dim)

    @classmethod
    def _checked(cls, path: Path, encoder, vocab: Vocabulary | None, manifest: dict, output_dim: int) -> "Bundle":
        """The bundle at ``path`` once its index and corpus agree with the encoder and the manifest."""
        index = VectorIndex.load(path / "index.faiss", manifest["index"])
        corpus = _read_corpus(path / "corpus.parquet")
        problems = []
        if index.dim != output_dim:
            problems.append(f"index vectors have {index.dim} dimensions, the encoder makes {output_dim}")
        if len(index) != len(corpus):
            problems.append(f"index holds {len(index)} vectors for {len(corpus)} corpus questions")
        if fingerprint(corpus) != manifest["data_fingerprint"]:
            problems.append("corpus.parquet is not the corpus the manifest was built on (fingerprint differs)")
        if problems:
            raise QPRError(f"{path}: inconsistent bundle: " + "; ".join(problems) + ". Rebuild the index with `python -m qpr index`.")
        return cls(encoder, vocab, index, corpus, manifest)


REBUILD = "the bundle is damaged: rebuild it with `python -m qpr train` (or restore a copy)"
# What the manifest must hold, and the JSON types: everything ``load`` reads from it (a seed
# system's bundle has no vocabulary, so no vocab_rows).
MANIFEST_FIELDS = {"format_version": int, "version": str, "encoder_config": dict, "vocab_rows": int, "index": dict,
                   "data_fingerprint": str}
SEED_MANIFEST_FIELDS = {name: kind for name, kind in MANIFEST_FIELDS.items() if name != "vocab_rows"} | {"system": str}
LEXICAL_FIELDS = {"format_version": int, "version": str, "data_fingerprint": str}


def system_of(encoder) -> str:
    """The system name of ``encoder``: its own for a seed system, else the QuestionEncoder's architecture."""
    if isinstance(encoder, QuestionEncoder):
        return "lstm" if encoder.config.architecture == "lstm" else "cnn-sdml"
    return encoder.system


def bundle_files(system: str) -> tuple[str, ...]:
    """The files a bundle of ``system`` must hold."""
    if system in NEURAL_SYSTEMS:
        return FILES
    if system == LEXICAL:
        return LEXICAL_FILES
    return SEED_FILES + files_of(system)


def _encode(encoder, vocab: Vocabulary | None, texts: Sequence[str]) -> np.ndarray:
    if isinstance(encoder, QuestionEncoder):
        return encode_texts(encoder, vocab, list(texts))
    return np.ascontiguousarray(encoder.encode(list(texts)), dtype=np.float32)


def _manifest_system(path: Path) -> str:
    """The manifest's ``system`` (a CNN / LSTM when it has none), read before its files are checked;
    an unreadable manifest is left for ``read_manifest`` to name."""
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return NEURAL_SYSTEMS[0]
    if isinstance(manifest, dict) and manifest.get("lexical") is True:
        return LEXICAL
    system = manifest.get("system") if isinstance(manifest, dict) else None
    return system if isinstance(system, str) else NEURAL_SYSTEMS[0]


INDEX_FIELDS = {"factory": str}  # search parameters (or, in older bundles, nprobe and ef_search) are checked by VectorIndex.load


def read_manifest(path: Path) -> dict:
    """The manifest of the bundle folder ``path``, checked for every field ``load`` uses."""
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise QPRError(f"{path}/manifest.json is not valid JSON ({one_line(err)}); {REBUILD}") from err
    except OSError as err:
        raise QPRError(f"{path}/manifest.json cannot be read: {err.strerror or err}") from err
    if not isinstance(manifest, dict):
        raise QPRError(f"{path}/manifest.json holds a JSON {type(manifest).__name__}, not an object; {REBUILD}")
    if "format_version" in manifest and manifest["format_version"] != FORMAT_VERSION:
        raise QPRError(
            f"{path}: bundle format {manifest.get('format_version')!r}, this version reads {FORMAT_VERSION}; "
            "rebuild it with `python -m qpr train`"
        )
    if manifest.get("lexical") is True:
        checks = [(LEXICAL_FIELDS, manifest)]
    else:
        required = MANIFEST_FIELDS if manifest.get("system", NEURAL_SYSTEMS[0]) in NEURAL_SYSTEMS else SEED_MANIFEST_FIELDS
        checks = [(required, manifest), (INDEX_FIELDS, manifest.get("index"))]
    for fields, where in checks:
        if not isinstance(where, dict):
            break
        missing = [name for name in fields if name not in where]
        if missing:
            prefix = "" if where is manifest else "index."
            raise QPRError(f"{path}/manifest.json lacks {', '.join(prefix + m for m in missing)}; {REBUILD}")
        wrong = [name for name, kind in fields.items()
                 if not isinstance(where[name], kind) or (kind is int and isinstance(where[name], bool))]
        if wrong:
            prefix = "" if where is manifest else "index."
            raise QPRError(f"{path}/manifest.json: {', '.join(prefix + w for w in wrong)} has the wrong type "
                           f"(expected {', '.join(fields[w].__name__ for w in wrong)}); {REBUILD}")
    return manifest


def _read_corpus(path: Path) -> pd.DataFrame:
    try:
        corpus = pd.read_parquet(path)
    except (ValueError, OSError, pa.ArrowException) as err:
        raise QPRError(f"{path} is not a readable Parquet file ({one_line(err)}); {REBUILD}") from err
    missing = [c for c in COLUMNS if c not in corpus.columns]
    if missing:
        raise QPRError(f"{path} lacks column(s) {', '.join(missing)}; {REBUILD}")
    return corpus


def is_bundle(path: str | Path) -> bool:
    """Whether ``path`` is a folder this package wrote as a bundle: a manifest object with a format
    version and a version, and no entries other than a bundle's files (``FILES``, a seed system's
    ``encoder.npz``, or a transformer's model folder)."""
    path = Path(path)
    try:
        entries = set(os.listdir(path))
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return (isinstance(manifest, dict) and {"format_version", "version"} <= manifest.keys()
            and entries <= set(FILES) | {"encoder.npz", TRANSFORMER_MODEL})


def check_target(path: str | Path) -> None:
    """Refuse a bundle destination that is neither new nor a bundle, before anything is written.

    A new path (or an empty folder) and an existing bundle may be written; an existing file, a
    folder holding anything else, or a symbolic link is refused with QPRError, and so is a folder
    that cannot be written. Nothing that is not a bundle is ever moved or replaced.
    """
    path = Path(path)
    if path.is_symlink():
        raise QPRError(f"{path} is a symbolic link; give the bundle folder it points to, or a new path "
                       "(nothing was changed)")
    if not path.exists():
        recover(path, wait=0)  # a bundle whose swap was interrupted is still a bundle
    if not path.exists():
        check_writable(path)
        return
    if not path.is_dir():
        raise QPRError(f"{path} is an existing file, not a bundle; choose a new path for the bundle (nothing was changed)")
    try:
        entries = sorted(os.listdir(path))
    except OSError as err:
        raise QPRError(f"{path} cannot be read ({err.strerror or err}); choose another path") from err
    if entries and not is_bundle(path):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise QPRError(f"{path} is an existing folder that is not a bundle (it holds {shown}); choose a new path, or "
                       "move that folder away yourself (nothing was changed)")
    check_writable(path)
