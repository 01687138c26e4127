"""A bundle: the one directory that serving needs, written atomically and validated on load.

Layout::

    manifest.json   format version, bundle version, configs, data fingerprint, metrics, history
    vocab.json      the vocabulary (``qpr.text``)
    encoder.pt      encoder weights (state dict)
    index.faiss     FAISS index whose ids are the corpus' qids
    corpus.parquet  qid, question, cluster, split

``version`` (creation time + a digest of the weights) is what annotation judgments refer to.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import torch

from qpr.data import COLUMNS, fingerprint
from qpr.encoder import EncoderConfig, QuestionEncoder, encode_texts
from qpr.errors import QPRError
from qpr.fsutil import atomic_path
from qpr.index import IndexConfig, VectorIndex
from qpr.text import Vocabulary

FORMAT_VERSION = 1
FILES = ("manifest.json", "vocab.json", "encoder.pt", "index.faiss", "corpus.parquet")


@dataclass
class Bundle:
    """Encoder + vocabulary + index + corpus, and the manifest that describes them."""

    encoder: QuestionEncoder
    vocab: Vocabulary
    index: VectorIndex
    corpus: pd.DataFrame
    manifest: dict = field(default_factory=dict)

    @property
    def version(self) -> str:
        return self.manifest["version"]

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
        vectors = encode_texts(encoder, vocab, corpus["question"].tolist())
        index = VectorIndex.build(vectors, corpus["qid"].to_numpy(), index_config)
        weights = io.BytesIO()
        torch.save(encoder.state_dict(), weights)
        created = datetime.now(timezone.utc)
        manifest = {
            "format_version": FORMAT_VERSION,
            "version": f"{created:%Y%m%dT%H%M%SZ}-{hashlib.sha256(weights.getvalue()).hexdigest()[:8]}",
            "created": created.isoformat(timespec="seconds"),
            "text_config": asdict(vocab.config),
            "encoder_config": encoder.config.to_dict(),
            "vocab_rows": encoder.vocab_rows,
            "index": index.settings() | {"ntotal": len(index), "dim": index.dim},
            "data_fingerprint": fingerprint(corpus),
            "corpus_size": len(corpus),
            "training": train_info or {},
            "metrics": metrics or {},
        }
        return cls(encoder, vocab, index, corpus, manifest)

    def with_index(self, index_config: IndexConfig) -> "Bundle":
        """The same bundle re-indexed with other settings (new index, same encoder and corpus)."""
        vectors = encode_texts(self.encoder, self.vocab, self.corpus["question"].tolist())
        index = VectorIndex.build(vectors, self.corpus["qid"].to_numpy(), index_config)
        manifest = self.manifest | {"index": index.settings() | {"ntotal": len(index), "dim": index.dim}}
        return Bundle(self.encoder, self.vocab, index, self.corpus, manifest)

    def with_fusion(self, fusion: dict) -> "Bundle":
        """The same bundle carrying a fitted hybrid scorer (``qpr.hybrid.Fusion.to_dict()``)."""
        return Bundle(self.encoder, self.vocab, self.index, self.corpus, self.manifest | {"fusion": fusion})

    def save(self, path: str | Path) -> Path:
        """Write the bundle to ``path`` atomically: a crash leaves the old bundle or none, never half."""
        path = Path(path)
        with atomic_path(path, directory=True) as tmp:
            self.vocab.save(tmp / "vocab.json")
            torch.save(self.encoder.state_dict(), tmp / "encoder.pt")
            self.index.save(tmp / "index.faiss")
            self.corpus.to_parquet(tmp / "corpus.parquet", index=False)
            # The manifest goes last: a directory with a manifest was completely written.
            (tmp / "manifest.json").write_text(json.dumps(self.manifest, indent=2, ensure_ascii=False))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Bundle":
        """Load and cross-check a bundle; raises QPRError naming exactly what is missing or wrong."""
        path = Path(path)
        if not path.is_dir():
            raise QPRError(f"{path}: no bundle directory there (train one with `python -m qpr train`)")
        missing = [name for name in FILES if not (path / name).is_file()]
        if missing:
            raise QPRError(f"{path}: incomplete bundle, missing {', '.join(missing)}")
        try:
            manifest = json.loads((path / "manifest.json").read_text())
        except ValueError as err:
            raise QPRError(f"{path}/manifest.json is not valid JSON ({err})") from err
        if manifest.get("format_version") != FORMAT_VERSION:
            raise QPRError(
                f"{path}: bundle format {manifest.get('format_version')!r}, this version reads {FORMAT_VERSION}; "
                "rebuild it with `python -m qpr train`"
            )
        vocab = Vocabulary.load(path / "vocab.json")
        encoder_config = EncoderConfig(**manifest["encoder_config"])
        if vocab.size != manifest["vocab_rows"]:
            raise QPRError(f"{path}: vocab.json gives {vocab.size} embedding rows, the manifest {manifest['vocab_rows']}")
        encoder = QuestionEncoder(vocab.size, encoder_config)
        try:
            encoder.load_state_dict(torch.load(path / "encoder.pt", weights_only=True))
        except (RuntimeError, OSError, EOFError) as err:
            raise QPRError(f"{path}/encoder.pt does not match the manifest's encoder config: {str(err).splitlines()[0]}") from err
        encoder.eval()
        index = VectorIndex.load(path / "index.faiss", manifest["index"])
        corpus = pd.read_parquet(path / "corpus.parquet")
        problems = []
        if index.dim != encoder_config.output_dim:
            problems.append(f"index vectors have {index.dim} dimensions, the encoder makes {encoder_config.output_dim}")
        if len(index) != len(corpus):
            problems.append(f"index holds {len(index)} vectors for {len(corpus)} corpus questions")
        if fingerprint(corpus) != manifest["data_fingerprint"]:
            problems.append("corpus.parquet is not the corpus the manifest was built on (fingerprint differs)")
        if problems:
            raise QPRError(f"{path}: inconsistent bundle: " + "; ".join(problems) + ". Rebuild the index with `python -m qpr index`.")
        return cls(encoder, vocab, index, corpus, manifest)
