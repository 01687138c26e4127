"""The static student (system ``static``): a table of token vectors distilled from MiniLM, then
trained to regress onto MiniLM's sentence vectors; a question is the mean of its tokens' rows,
projected to MiniLM's width and normalized. No convolution, no attention: the fastest encoder the
product has, and out of domain closer to MiniLM than the CNN, but its retraining distils MiniLM
again and learns nothing from judgments (docs/OUT_OF_DOMAIN.md; the README says when to pick which).

The table follows Model2Vec's distillation (MinishLab/model2vec): each of MiniLM's 30,522
WordPiece tokens encoded alone by MiniLM (``qpr.training.teacher.token_vectors``), reduced to
``DIMS`` by PCA, and each row weighted by SIF (``a / (a + p)``, ``p`` the token's probability
estimated by Zipf's law from its id rank, ``a`` = ``SIF``), so frequent tokens count less in a
mean. The projection starts as the PCA's inverse, so the untrained student already lives in
MiniLM's space; the distillation (``qpr.training.distill.train_general``, ``1 - cos`` to MiniLM)
then trains table and projection together.

Its tokenizer is MiniLM's uncased WordPiece (``WordPiece``), written here so that serving needs no
transformer library, with no padding and no length cut (the packaged ``tokenizer.json``, which
``tokenizers`` and Model2Vec read, pads and truncates to 128 tokens; here a question is as long
as its tokens). A bundle of it holds ``static.safetensors`` (table
and projection) and ``wordpiece.txt`` (the vocabulary, one token a line).
"""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from sklearn.decomposition import PCA
from torch import nn

from qpr.errors import QPRError
from qpr.fsutil.atomic import atomic_path
from qpr.training.distill import GeneralConfig, Unlabelled, train_general
from qpr.training.teacher import TEACHER, minilm_vectors, teacher_vocabulary, token_vectors

SYSTEM = "static"
WEIGHTS = "static.safetensors"
VOCABULARY = "wordpiece.txt"
FILES = (WEIGHTS, VOCABULARY)
DIMS = 256  # Model2Vec's default PCA width
SIF = 1e-4  # Model2Vec's SIF coefficient
MAX_WORD_CHARS = 100  # BERT's: a longer word is one unknown token


class WordPiece:
    """BERT's uncased tokenizer over ``tokens`` (id = position): text cleaned, lowercased, accents
    stripped, split at whitespace and punctuation (each CJK character apart), then each word split
    greedily into the longest known pieces (``##`` continuations); a word with no split is
    ``[UNK]``. Ids only, no special tokens, no padding."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self.tokens = list(tokens)
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        if "[UNK]" not in self.ids or self.ids.get("[PAD]") != 0:
            raise QPRError("a WordPiece vocabulary needs [PAD] at id 0 and an [UNK] token")
        self.unknown = self.ids["[UNK]"]

    @property
    def size(self) -> int:
        return len(self.tokens)

    def words(self, text: str) -> list[str]:
        """``text`` cleaned, lowercased, accents stripped and split into words and punctuation marks."""
        text = unicodedata.normalize("NFD", text.lower())
        out, word = [], []
        for char in text:
            code, category = ord(char), unicodedata.category(char)
            if code in (0, 0xFFFD) or category == "Mn" or (category.startswith("C") and char not in "\t\n\r"):
                continue  # control characters and the accents NFD split off
            if char.isspace():
                out.append("".join(word))
                word = []
            elif _punctuation(char, code, category) or _cjk(code):
                out.extend(("".join(word), char))
                word = []
            else:
                word.append(char)
        out.append("".join(word))
        return [w for w in out if w]

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in self.words(text):
            if len(word) > MAX_WORD_CHARS:
                ids.append(self.unknown)
                continue
            pieces, start = [], 0
            while start < len(word):
                end = len(word)
                while end > start and (("##" if start else "") + word[start:end]) not in self.ids:
                    end -= 1
                if end == start:
                    pieces = [self.unknown]
                    break
                pieces.append(self.ids[("##" if start else "") + word[start:end]])
                start = end
            ids.extend(pieces)
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]


def _punctuation(char: str, code: int, category: str) -> bool:
    # BERT counts every non-alphanumeric ASCII character as punctuation, with Unicode's P*.
    return 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126 or category.startswith("P")


def _cjk(code: int) -> bool:
    return any(low <= code <= high for low, high in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
                                                     (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


@dataclass(frozen=True)
class StaticConfig:
    """The table's width (``embedding_dim``) and the output's (MiniLM's); vectors are unit length."""

    embedding_dim: int = DIMS
    output_dim: int = 384
    normalize: bool = True


class StaticEncoder(nn.Module):
    """A question's vector: the mean of its tokens' table rows (id 0, padding, left out), projected
    and normalized. ``forward`` takes padded id rows (the distillation's ``encode_ids``);
    ``encode`` takes texts (``qpr.bundles.bundle.TextEncoder``)."""

    system = SYSTEM

    def __init__(self, tokenizer: WordPiece, config: StaticConfig = StaticConfig()) -> None:
        super().__init__()
        self.tokenizer, self.config = tokenizer, config
        self.embedding = nn.Embedding(tokenizer.size, config.embedding_dim, padding_idx=0)
        self.projection = nn.Linear(config.embedding_dim, config.output_dim)

    @property
    def output_dim(self) -> int:
        return self.config.output_dim

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = (ids != 0).unsqueeze(-1).float()
        mean = (self.embedding(ids) * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return F.normalize(self.projection(mean), dim=1)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], chunk: int = 4096) -> np.ndarray:
        """Unit-length float32 rows, one per text (an empty text: the projection's bias, normalized)."""
        rows = []
        for start in range(0, len(texts), chunk):
            lists = self.tokenizer.encode_batch(texts[start:start + chunk])
            flat = torch.as_tensor([i for ids in lists for i in ids], dtype=torch.long)
            offsets = torch.as_tensor(np.cumsum([0] + [len(ids) for ids in lists[:-1]]), dtype=torch.long)
            pooled = F.embedding_bag(flat, self.embedding.weight.cpu(), offsets, mode="mean")
            rows.append(F.normalize(F.linear(pooled, self.projection.weight.cpu(), self.projection.bias.cpu()), dim=1).numpy())
        return np.concatenate(rows).astype(np.float32) if rows else np.zeros((0, self.output_dim), dtype=np.float32)

    def settings(self) -> dict:
        return asdict(self.config)

    def save(self, folder: Path) -> None:
        with atomic_path(folder / WEIGHTS) as tmp:
            save_file({name: value.detach().cpu().contiguous() for name, value in self.state_dict().items()}, str(tmp))
        with atomic_path(folder / VOCABULARY) as tmp:
            tmp.write_text("\n".join(self.tokenizer.tokens) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, settings: dict) -> "StaticEncoder":
        tokens = (folder / VOCABULARY).read_text(encoding="utf-8").split("\n")[:-1]
        encoder = cls(WordPiece(tokens), StaticConfig(**settings))
        state = load_file(str(folder / WEIGHTS))
        if state["embedding.weight"].shape[0] != len(tokens):
            raise QPRError(f"{folder}: {WEIGHTS} has {state['embedding.weight'].shape[0]} token rows for {len(tokens)} "
                           f"tokens in {VOCABULARY}; rebuild the bundle")
        encoder.load_state_dict(state)
        return encoder.eval()


def distilled_table(tokens: Sequence[str], token_vectors: np.ndarray, dims: int = DIMS, seed: int = 0) -> StaticEncoder:
    """A static student (module doc) from its teacher's vector of each token alone (``token_vectors``,
    one row per token of ``tokens``, in id order): PCA to ``dims``, SIF weights by id rank, and a
    projection that starts as the PCA's inverse (into the teacher's space)."""
    vectors = np.asarray(token_vectors, dtype=np.float64)
    if len(vectors) != len(tokens):
        raise QPRError(f"{len(vectors)} token vectors for {len(tokens)} tokens: one each")
    dims = min(dims, *vectors.shape)
    pca = PCA(dims, random_state=seed).fit(vectors)
    table = pca.transform(vectors)
    rank = 1.0 / np.arange(2, len(table) + 2)
    table *= (SIF / (SIF + rank / rank.sum()))[:, None]
    encoder = StaticEncoder(WordPiece(tokens), StaticConfig(embedding_dim=dims, output_dim=vectors.shape[1]))
    with torch.no_grad():
        encoder.embedding.weight.copy_(torch.from_numpy(table).float())
        encoder.embedding.weight[0] = 0.0  # padding
        encoder.projection.weight.copy_(torch.from_numpy(pca.components_.T).float())
        encoder.projection.bias.copy_(torch.from_numpy(pca.mean_).float())
    return encoder.eval()


@dataclass(frozen=True)
class StaticSettings:
    """``qpr train --system static``: the table's width, and the distillation on the corpus's
    questions (every question each epoch, ``1 - cos`` to MiniLM, Adam)."""

    dims: int = DIMS
    epochs: int = 3
    batch_size: int = 256
    lr: float = 4e-3
    seed: int = 0


def static_student(dims: int = DIMS, seed: int = 0, cache: Path | None = None, progress: bool = False) -> StaticEncoder:
    """A new static student of MiniLM (``distilled_table`` over MiniLM's tokens alone, cached in
    ``cache/minilm-tokens.npy``); QPRError without the benchmark extra."""
    return distilled_table(teacher_vocabulary(), token_vectors(cache / "minilm-tokens.npy" if cache else None, progress), dims, seed)


def distil(encoder: StaticEncoder, questions: Sequence[str], teacher: np.ndarray, settings: StaticSettings,
           progress: bool = False) -> tuple[StaticEncoder, list[dict]]:
    """``encoder`` (a copy) trained to regress onto ``teacher`` (MiniLM's unit vectors of
    ``questions``) by the general encoder's distillation (``qpr.training.distill.train_general``)."""
    config = GeneralConfig(per_source=0, unlabelled_per_epoch=len(questions), epochs=settings.epochs, batch_size=settings.batch_size,
                           lr=settings.lr, seed=settings.seed)
    result = train_general({}, Unlabelled(list(questions), teacher), config, warm_start=(encoder, encoder.tokenizer), progress=progress)
    return result.encoder.eval(), result.history


def fit(corpus, settings: StaticSettings, warm_start: StaticEncoder | None, progress: bool) -> tuple[StaticEncoder, dict]:
    """The System's fit: a static student (or ``warm_start``) distilled on ``corpus``'s questions."""
    questions = corpus["question"].tolist()
    encoder = warm_start or static_student(settings.dims, settings.seed, progress=progress)
    trained, history = distil(encoder, questions, minilm_vectors(questions, progress=progress), settings, progress)
    return trained, {"history": history, "teacher": TEACHER}
