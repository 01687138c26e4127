"""The paper's question encoder: embeddings -> convolution(s) -> tanh -> masked max pool -> linear,
or, with ``architecture="lstm"``, embeddings -> bi-directional LSTM -> masked mean or max pool -> linear
(the AskUbuntu paper's other encoder).

``QuestionEncoder`` maps padded token-id batches to n-dimensional vectors; ``encode_texts`` runs it
over any number of questions in batches and returns a float32 matrix ready for FAISS.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from qpr.errors import QPRError
from qpr.model.device import BULK, current_device
from qpr.model.text import PAD_ID, Vocabulary


@dataclass(frozen=True)
class EncoderConfig:
    """Layer sizes: 300-d embeddings, convolutions of windows 1, 3 and 5, 300-d output.

    ``windows`` may list several window sizes; each gets ``channels`` filters and their pooled
    features are concatenated before the projection. The paper used one window of 5
    (``PAPER_ENCODER``); windows 1, 3 and 5 scored 9 points of val H@1 more on Quora-lite at
    the same epoch budget and as much when trained to convergence, while still encoding about
    10-18x faster than all-MiniLM-L6-v2 (docs/QUALITY.md), so they are the default.
    ``normalize`` puts every output vector on the unit sphere, so that the index's Euclidean
    ranking is a cosine ranking (needed by the cosine distance in training).

    ``architecture`` "lstm" replaces the convolutions by a bi-directional LSTM with ``channels``
    hidden units per direction, pooled over the question's tokens by ``pooling`` ("mean" or
    "max"; padding is masked out of both), then projected to ``output_dim``. ``windows`` is then
    unused. Bundles record these fields in their manifest, so they reload as trained; bundles
    written before they existed are CNNs and load as such.

    The CNN pools by "max" (the paper), or by "max+mean": each window's features pooled both
    ways, concatenated (a distilled student's teacher, all-MiniLM-L6-v2, pools by mean).
    """

    embedding_dim: int = 300
    windows: tuple[int, ...] = (1, 3, 5)
    channels: int = 300
    output_dim: int = 300
    normalize: bool = False
    architecture: str = "cnn"
    pooling: str = "max"

    def __post_init__(self) -> None:
        if self.architecture not in ("cnn", "lstm"):
            raise QPRError(f"unknown encoder architecture {self.architecture!r}: use 'cnn' or 'lstm'")
        if self.pooling not in (("max", "max+mean") if self.architecture == "cnn" else ("max", "mean")):
            raise QPRError(f"pooling {self.pooling!r} with {self.architecture!r}: the CNN pools by 'max' or 'max+mean', "
                           "the LSTM by 'max' or 'mean'")
        object.__setattr__(self, "windows", tuple(int(w) for w in self.windows))
        if not self.windows or min(self.windows) < 1:
            raise QPRError(f"windows must be a non-empty list of positive sizes, got {self.windows}")
        if min(self.embedding_dim, self.channels, self.output_dim) < 1:
            raise QPRError(f"layer sizes must be positive: {self}")

    def to_dict(self) -> dict:
        return asdict(self) | {"windows": list(self.windows)}


# The paper's encoder: what the reproduction experiments (and their recorded results) use.
PAPER_ENCODER = EncoderConfig(windows=(5,))


class QuestionEncoder(nn.Module):
    """CNN sentence encoder. Input: ``(batch, length)`` token ids with 0 as padding.

    Output: ``(batch, output_dim)`` vectors. Every position beyond a question's length is masked
    out of the max pool, so padding never changes a question's vector.

    >>> enc = QuestionEncoder(vocab_rows=100, config=EncoderConfig(embedding_dim=8, channels=4, output_dim=3))
    >>> enc(torch.tensor([[5, 6, 7, 0], [9, 0, 0, 0]])).shape
    torch.Size([2, 3])
    """

    def __init__(self, vocab_rows: int, config: EncoderConfig = EncoderConfig()) -> None:
        super().__init__()
        self.config = config
        self.vocab_rows = vocab_rows
        self.embedding = nn.Embedding(vocab_rows, config.embedding_dim, padding_idx=PAD_ID)
        if config.architecture == "lstm":
            self.lstm = nn.LSTM(config.embedding_dim, config.channels, batch_first=True, bidirectional=True)
            self.projection = nn.Linear(2 * config.channels, config.output_dim)
            return
        # Odd windows with padding w//2 keep one output per token; even ones give one extra,
        # trimmed in forward, so masking by token position is exact for every window.
        self.convs = nn.ModuleList(
            nn.Conv1d(config.embedding_dim, config.channels, w, padding=w // 2) for w in config.windows
        )
        pools = 2 if config.pooling == "max+mean" else 1
        self.projection = nn.Linear(config.channels * len(config.windows) * pools, config.output_dim)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``token_ids``: ``(batch, length)``, or ``(batch, length, ids per token)`` with subwords,
        where a token's vector is the mean of its non-padding ids' embeddings."""
        length = token_ids.shape[1]
        if token_ids.dim() == 3:
            batch, _, widest = token_ids.shape
            # One bag per token, averaged over its non-padding ids: never materialises the
            # (batch, length, ids, dim) tensor that an embedding lookup then a mean would.
            embedded = F.embedding_bag(token_ids.reshape(-1, widest), self.embedding.weight, mode="mean",
                                       padding_idx=PAD_ID).view(batch, length, -1)
            mask = (token_ids[:, :, 0] != PAD_ID).unsqueeze(1)  # a token's own id comes first
        else:
            embedded = self.embedding(token_ids)
            mask = (token_ids != PAD_ID).unsqueeze(1)  # (batch, 1, length)
        if self.config.architecture == "lstm":
            vectors = self._lstm_pool(embedded, mask.squeeze(1))
            return F.normalize(vectors, dim=1) if self.config.normalize else vectors
        embedded = embedded.transpose(1, 2)  # (batch, dim, length)
        pooled = []
        for conv in self.convs:
            features = torch.tanh(conv(embedded)[:, :, :length])
            pooled.append(features.masked_fill(~mask, float("-inf")).amax(dim=2))
            if self.config.pooling == "max+mean":
                pooled.append((features * mask).sum(dim=2) / mask.sum(dim=2))  # every question has a token
        vectors = self.projection(torch.cat(pooled, dim=1))
        return F.normalize(vectors, dim=1) if self.config.normalize else vectors


    def _lstm_pool(self, embedded: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Bi-LSTM over each question's own tokens (packed: padding never enters the recurrence),
        pooled over them, projected."""
        lengths = mask.sum(dim=1).clamp_min(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        states, _ = nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=embedded.shape[1])
        keep = mask.unsqueeze(2)  # (batch, length, 1)
        if self.config.pooling == "mean":
            pooled = (states * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1)
        else:
            pooled = states.masked_fill(~keep, float("-inf")).amax(dim=1)
        return self.projection(pooled)


def pad_batch(id_lists: Sequence[Sequence]) -> torch.Tensor:
    """Right-pad token-id lists with PAD_ID into one ``(batch, longest)`` LongTensor, or, when each
    token is a list of ids (subwords), into ``(batch, longest, most ids of a token)``."""
    longest = max(len(ids) for ids in id_lists)
    if not isinstance(id_lists[0][0], list):
        batch = torch.full((len(id_lists), longest), PAD_ID, dtype=torch.long)
        for row, ids in enumerate(id_lists):
            batch[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        return batch
    widest = max(len(token) for ids in id_lists for token in ids)
    batch = np.full((len(id_lists), longest, widest), PAD_ID, dtype=np.int64)
    for row, ids in enumerate(id_lists):
        for position, token in enumerate(ids):
            batch[row, position, : len(token)] = token
    return torch.from_numpy(batch)


def encode_ids(encoder: QuestionEncoder, id_lists: Sequence[Sequence[int]], chunk_size: int = 128) -> torch.Tensor:
    """Encode token-id lists into ``(n, output_dim)`` vectors, in the order given (keeps grad).

    Questions are encoded in length-sorted chunks, each padded only to its own longest member.
    Masked max pooling makes the result identical to one padded batch, while a random batch
    padded to its longest question would spend most of the convolution on padding.
    """
    order = np.argsort([len(ids) for ids in id_lists], kind="stable")
    device = next(encoder.parameters()).device
    parts = [
        encoder(pad_batch([id_lists[i] for i in order[start : start + chunk_size]]).to(device))
        for start in range(0, len(order), chunk_size)
    ]
    restore = torch.as_tensor(np.argsort(order, kind="stable"), device=device)
    return torch.cat(parts)[restore]


@torch.inference_mode()
def encode_texts(
    encoder: QuestionEncoder, vocab: Vocabulary, texts: Sequence[str], chunk_size: int = 256, block: int = 65_536
) -> np.ndarray:
    """Encode ``texts`` into a ``(len(texts), output_dim)`` float32 array (eval mode, no grad): a
    bulk of texts (``qpr.model.device.BULK`` or more) on the chosen device (a copy of the encoder
    goes there, so a served encoder is never moved), fewer on the encoder's own device.

    Texts are tokenized ``block`` at a time by ``Vocabulary.encode_batch`` and encoded in
    length-sorted chunks, each padded only to its own longest member (as ``encode_ids``).
    Raises QPRError naming an empty text, before any work on its block is done.
    """
    texts = list(texts)
    device = next(encoder.parameters()).device
    if len(texts) >= BULK and current_device() != device:
        encoder, device = copy.deepcopy(encoder).to(current_device()), current_device()
    was_training = encoder.training
    encoder.eval()
    out = np.empty((len(texts), encoder.config.output_dim), dtype=np.float32)
    try:
        for start in range(0, len(texts), block):
            batch = vocab.encode_batch(texts[start : start + block])
            order = np.argsort(batch.lengths, kind="stable")
            for first in range(0, len(order), chunk_size):
                rows = order[first : first + chunk_size]
                ids = torch.from_numpy(batch.padded(rows)).to(device)
                out[start + rows] = encoder(ids).float().cpu().numpy()
    finally:
        encoder.train(was_training)
    return out
