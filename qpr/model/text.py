"""Tokenizer and vocabulary with the hashing trick for rare and unseen words.

Token ids: 0 is padding, 1..V are the (at most ``vocab_size``) most frequent corpus tokens, and
V+1..V+m are m hash bins.
Every token outside the vocabulary lands in a bin chosen by a stable hash (CRC32 of its UTF-8
bytes, not Python's per-process salted ``hash()``), so a word never seen in training still maps to
a learned vector, and the same word maps to the same bin on every machine and run.

With ``subword_ngrams`` n > 0 each token also carries the bins of its character n-grams (as in
fastText), and the encoder averages the vectors of a token's ids: a misspelt or unseen word then
shares some of its ids with the words it resembles instead of landing on one unrelated bin.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import threading
import zlib
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from qpr.errors import QPRError, one_line

# A token is a run of word characters (letters, digits, underscore in any script) or a single
# character that is neither a word character nor whitespace (punctuation, symbols, emoji).
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)

_WORD = re.compile(r"\w+", re.UNICODE)

PAD_ID = 0
MAX_QUERY_CHARS = 2000
MAX_K = 1000

_SURROGATE = re.compile("[\ud800-\udfff]")

# ``encode_batch`` joins a batch's texts with this character and tokenizes them in one pass: a
# private-use character is neither a word character nor whitespace, so it is a token of its own
# that marks where a text ends; it is not cased nor case-ignorable, so lowercasing the joined text
# lowers each text as alone (Greek final sigma included). A batch that contains it is tokenized
# text by text instead.
_SEPARATOR = "\ue000"


def text_problem(text: str) -> str | None:
    """What makes ``text`` unusable as a question, or None: a NUL character (files and databases
    cut or refuse text at it) or a lone surrogate (half of a UTF-16 pair, e.g. from a file decoded
    with ``surrogateescape``: it has no UTF-8 form, so it can be neither hashed nor stored)."""
    if "\x00" in text:
        return f"contains a NUL character (\\x00) at position {text.index(chr(0))}; remove it"
    bad = _SURROGATE.search(text)
    if bad:
        return (f"contains a lone surrogate ({bad.group()!r}) at position {bad.start()}, which is not valid Unicode; "
                "re-read the source as UTF-8 or remove it")
    return None


def check_text(text: object, what: str = "the query") -> str:
    """``text`` itself if it is a string fit to encode, store and hash, else QPRError saying why."""
    if not isinstance(text, str):
        raise QPRError(f"{what} must be a string, got {type(text).__name__}")
    problem = text_problem(text)
    if problem:
        raise QPRError(f"{what} {problem}")
    return text


def tokenize(text: str) -> list[str]:
    """Lowercase ``text`` and split it into words and single punctuation/symbol characters.

    >>> tokenize("How do I learn Python, fast?")
    ['how', 'do', 'i', 'learn', 'python', ',', 'fast', '?']
    """
    return _TOKEN.findall(text.lower())


def words(text: str) -> list[str]:
    """Lowercased word tokens only (no punctuation): what lexical retrieval (BM25) matches on.

    >>> words("How do I learn Python, fast?")
    ['how', 'do', 'i', 'learn', 'python', 'fast']
    """
    return _WORD.findall(text.lower())


def check_queries(queries: Sequence[str], k: int) -> None:
    """Refuse what no retriever can answer, with a message that says what to change."""
    if not 1 <= k <= MAX_K:
        raise QPRError(f"k must be between 1 and {MAX_K}, got {k}")
    for text in queries:
        if isinstance(text, str):
            check_text(text, "the query")
        if not isinstance(text, str) or not tokenize(text):
            raise QPRError("the query is empty: type a question")
        if len(text) > MAX_QUERY_CHARS:
            raise QPRError(f"the query has {len(text):,} characters; shorten it to at most {MAX_QUERY_CHARS:,}")


def stable_bucket(token: str, bins: int) -> int:
    """The hash bin (0..bins-1) of ``token``; identical across processes and machines."""
    return zlib.crc32(token.encode("utf-8")) % bins


def _crc32s(texts: Iterable[str], count: int) -> np.ndarray:
    """``zlib.crc32`` of the UTF-8 bytes of each of ``count`` texts (what ``stable_bucket`` hashes)."""
    return np.fromiter(map(zlib.crc32, map(str.encode, texts)), dtype=np.int64, count=count)


def char_ngrams(token: str, n: int, limit: int) -> list[str]:
    """The first ``limit`` character ``n``-grams of ``token`` between word boundary marks.

    >>> char_ngrams("cat", 3, 16)
    ['<ca', 'cat', 'at>']
    >>> char_ngrams("a", 3, 16)
    ['<a>']
    """
    marked = f"<{token}>"
    return [marked[i : i + n] for i in range(max(len(marked) - n + 1, 1))][:limit]


@dataclass(frozen=True)
class TextConfig:
    """Vocabulary size V, number of hash bins m and the token limit per question (paper: 50k + 5k).

    Only tokens seen at least ``min_count`` times in training get their own id. With 1, a corpus
    with fewer than V distinct tokens (Quora-lite's train split has 26k) leaves every bin
    untrained, so words first seen at query time land on random vectors; a higher count sends
    the rare training words to the bins and trains them.

    ``subword_ngrams`` n > 0 adds the bins of up to ``max_ngrams`` character n-grams to every
    token (0: off, the paper's encoder, ``PAPER_TEXT``). Trigrams are the default: on Quora-lite
    they added 7.5 points of val H@1 to the paper's encoder and 5 to windows 1, 3 and 5 at the same
    epoch budget (docs/QUALITY.md), and they give typos and rare words most of a known word's ids.
    """

    vocab_size: int = 50_000
    hash_bins: int = 5_000
    max_len: int = 64
    min_count: int = 1
    subword_ngrams: int = 3
    max_ngrams: int = 16

    def __post_init__(self) -> None:
        if self.vocab_size < 0 or self.hash_bins < 1 or self.max_len < 1 or self.min_count < 1:
            raise QPRError(
                f"invalid text config {self}: need vocab_size >= 0, hash_bins >= 1, max_len >= 1, min_count >= 1"
            )
        if self.subword_ngrams < 0 or self.max_ngrams < 1:
            raise QPRError(f"invalid text config {self}: need subword_ngrams >= 0 (0 = off) and max_ngrams >= 1")



# The paper's text handling (word ids and hashed rare words, no subwords): what the reproduction
# experiments (and their recorded results) use.
PAPER_TEXT = TextConfig(subword_ngrams=0)


class Vocabulary:
    """Maps text to token ids: frequent tokens get their own id, the rest share m hash bins."""

    def __init__(self, tokens: list[str], config: TextConfig) -> None:
        if len(tokens) > config.vocab_size:
            raise QPRError(f"{len(tokens)} tokens given for a vocabulary of size {config.vocab_size}")
        self.config = config
        self.tokens = list(tokens)
        self._ids = {token: i + 1 for i, token in enumerate(self.tokens)}
        # Hashing a word's n-grams took a fifth of encoding time, and words repeat: remember them.
        self._with_subwords = functools.lru_cache(maxsize=1 << 17)(self._hash_with_subwords)
        self._pieces = _Pieces(self._token_rows, 1 + config.max_ngrams if config.subword_ngrams else 1)

    @classmethod
    def build(cls, texts: Iterable[str], config: TextConfig = TextConfig()) -> "Vocabulary":
        """The ``config.vocab_size`` most frequent tokens of ``texts`` seen at least
        ``config.min_count`` times (ties broken alphabetically)."""
        counts = Counter(token for text in texts for token in tokenize(text))
        ranked = sorted((item for item in counts.items() if item[1] >= config.min_count), key=lambda item: (-item[1], item[0]))
        return cls([token for token, _ in ranked[: config.vocab_size]], config)

    @property
    def size(self) -> int:
        """Number of embedding rows needed: padding + vocabulary + hash bins."""
        return 1 + len(self.tokens) + self.config.hash_bins

    def token_id(self, token: str) -> int:
        known = self._ids.get(token)
        if known is not None:
            return known
        return 1 + len(self.tokens) + stable_bucket(token, self.config.hash_bins)

    def subword_ids(self, token: str) -> list[int]:
        """The hash-bin ids of ``token``'s character n-grams (``subword_ngrams``; empty when off)."""
        n = self.config.subword_ngrams
        if n == 0:
            return []
        # The prefix keeps an n-gram out of the bin of the whole word spelt the same ("cat" in "<cat>").
        return [1 + len(self.tokens) + stable_bucket("\x00" + gram, self.config.hash_bins)
                for gram in char_ngrams(token, n, self.config.max_ngrams)]

    def encode(self, text: str) -> list[int] | list[list[int]]:
        """Token ids of ``text``, truncated to ``max_len``; raises QPRError if it has no tokens.

        With subwords on, one list per token instead: its own id, then its n-grams' bin ids.
        """
        check_text(text, "the question" if not isinstance(text, str) else f"the question {text[:40]!r}")
        tokens = tokenize(text)[: self.config.max_len]
        if not tokens:
            raise QPRError(f"the question {text[:40]!r} is empty: it contains no words or symbols")
        if self.config.subword_ngrams:
            return [list(self._with_subwords(token)) for token in tokens]
        return [self.token_id(token) for token in tokens]

    def encode_batch(self, texts: Sequence[str]) -> "TokenBatch":
        """The ids of many texts at once (``TokenBatch.padded()`` gives them as one padded array):
        the same ids as ``encode`` text by text, and a QPRError naming a bad text as ``encode``
        would, several times faster (docs/SERVING.md). The batch is lowercased and split at
        whitespace in one pass; each distinct piece between spaces ("python," "how") is tokenized
        and hashed once and its ids kept (``_Pieces``), since pieces repeat across questions."""
        texts = list(texts)
        if not texts:
            raise QPRError("no questions to encode")
        try:
            joined = _SEPARATOR.join(texts)
        except TypeError:  # not all strings
            joined = None
        if joined is None or "\x00" in joined or _SURROGATE.search(joined) or joined.count(_SEPARATOR) != len(texts) - 1:
            # A bad text (``encode`` names it), or one that holds the separator itself: text by text.
            lists = [self.encode(text) for text in texts]
            rows = [self._row(ids) for text_ids in lists for ids in text_ids]
            return TokenBatch(np.array(rows, dtype=np.int64).reshape(-1, self._pieces.width), np.arange(len(rows)),
                              np.array([len(ids) for ids in lists]), bool(self.config.subword_ngrams))
        table, first, count, codes = self._pieces.lookup(joined.replace(_SEPARATOR, f" {_SEPARATOR} ").lower().split())
        separator = codes == _Pieces.SEPARATOR_CODE
        text_of_piece, codes = np.cumsum(separator)[~separator], codes[~separator]
        per_piece = count[codes]
        text_of = np.repeat(text_of_piece, per_piece)
        counts = np.bincount(text_of, minlength=len(texts))
        if not counts.all():
            empty = texts[int(np.argmin(counts))]
            raise QPRError(f"the question {empty[:40]!r} is empty: it contains no words or symbols")
        token_rows = np.repeat(first[codes] - (np.cumsum(per_piece) - per_piece), per_piece) + np.arange(len(text_of))
        position = np.arange(len(text_of)) - (np.cumsum(counts) - counts)[text_of]
        keep = position < self.config.max_len
        return TokenBatch(table, token_rows[keep], np.minimum(counts, self.config.max_len), bool(self.config.subword_ngrams))

    def _row(self, ids: int | list[int]) -> tuple[int, ...]:
        """A token's ids (an item of ``encode``'s list) as one ``TokenBatch.table`` row."""
        ids = tuple(ids) if isinstance(ids, list) else (ids,)
        return ids + (PAD_ID,) * (self._pieces.width - len(ids))

    def _token_rows(self, tokens: list[str]) -> np.ndarray:
        """``TokenBatch.table`` rows for ``tokens``: each row holds ``token_id`` and then, with
        subwords on, ``subword_ids`` padded with ``PAD_ID``. The hashing loops run in C (``map``
        over ``zlib.crc32``), three times faster than ``subword_ids`` token by token; the test
        over the shared sets holds the two to the same ids."""
        n, bins, first_bin = self.config.subword_ngrams, self.config.hash_bins, 1 + len(self.tokens)
        rows = np.zeros((len(tokens), self._pieces.width), dtype=np.int64)
        rows[:, 0] = np.fromiter(map(self._ids.get, tokens, itertools.repeat(PAD_ID)), dtype=np.int64, count=len(tokens))
        unknown = np.flatnonzero(rows[:, 0] == PAD_ID)
        rows[unknown, 0] = first_bin + _crc32s(map(tokens.__getitem__, unknown.tolist()), len(unknown)) % bins
        if n:
            marked = ["<" + token + ">" for token in tokens]
            counts = np.clip(np.fromiter(map(len, marked), dtype=np.int64, count=len(tokens)) - n + 1, 1, self.config.max_ngrams)
            grams = ["\x00" + word[i : i + n] for word, count in zip(marked, counts.tolist()) for i in range(count)]
            position = np.arange(len(grams)) - np.repeat(np.cumsum(counts) - counts, counts)
            rows[np.repeat(np.arange(len(tokens)), counts), 1 + position] = first_bin + _crc32s(grams, len(grams)) % bins
        return rows

    def _hash_with_subwords(self, token: str) -> tuple[int, ...]:
        return (self.token_id(token), *self.subword_ids(token))

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps({"config": asdict(self.config), "tokens": self.tokens}, ensure_ascii=False))

    @classmethod
    def load(cls, path: Path) -> "Vocabulary":
        try:
            payload = json.loads(Path(path).read_text())
            # Vocabularies saved before subwords existed had none.
            return cls(payload["tokens"], TextConfig(**{"subword_ngrams": 0} | payload["config"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise QPRError(f"cannot read vocabulary {path}: {one_line(err)}") from err


class _Pieces:
    """The ``TokenBatch.table`` rows of every distinct whitespace-free piece of text seen, kept
    across batches (thread-safe): a piece is tokenized and hashed once. It forgets all at
    ``LIMIT`` pieces, so its memory stays bounded (about 150 MB with subwords) whatever the corpus."""

    LIMIT = 1 << 20
    SEPARATOR_CODE = 0  # ``_SEPARATOR``, the piece that parts texts: no tokens of its own

    def __init__(self, token_rows, width: int) -> None:
        self._token_rows = token_rows  # ``Vocabulary._token_rows``
        self.width = width
        self._lock = threading.Lock()
        self._clear()

    def _clear(self) -> None:
        self._code = {_SEPARATOR: self.SEPARATOR_CODE}
        self._table = np.zeros((1024, self.width), dtype=np.int64)
        self._used = 0  # rows of ``_table`` in use
        self._first = self._count = np.zeros(1, dtype=np.int64)  # by piece code; the separator has no rows

    def lookup(self, pieces: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(table, first, count, codes)``: ``codes[i]`` numbers ``pieces[i]``, and the rows of
        the tokens of the piece numbered c are ``table[first[c] : first[c] + count[c]]``."""
        with self._lock:
            try:  # map and fromiter loop in C: most pieces are known
                codes = np.fromiter(map(self._code.__getitem__, pieces), dtype=np.int64, count=len(pieces))
            except KeyError:
                new = [piece for piece in dict.fromkeys(pieces) if piece not in self._code]
                if len(self._code) + len(new) > self.LIMIT:
                    self._clear()
                    new = list(dict.fromkeys(pieces))
                self._add(new)
                codes = np.fromiter(map(self._code.__getitem__, pieces), dtype=np.int64, count=len(pieces))
            return self._table, self._first, self._count, codes

    def _add(self, pieces: list[str]) -> None:
        pieces = [piece for piece in pieces if piece != _SEPARATOR]
        # All pieces tokenized in one pass, each followed by the separator (a token of its own).
        found = _TOKEN.findall(_SEPARATOR.join(pieces) + _SEPARATOR)
        separator = np.fromiter(map(_SEPARATOR.__eq__, found), dtype=bool, count=len(found))
        count = np.diff(np.flatnonzero(separator), prepend=-1) - 1
        rows = self._token_rows(list(itertools.compress(found, ~separator)))
        needed = self._used + len(rows)
        if needed > len(self._table):  # a new, larger table: batches holding the old one keep it
            grown = np.zeros((max(needed, 2 * len(self._table)), self.width), dtype=np.int64)
            grown[: self._used] = self._table[: self._used]
            self._table = grown
        self._table[self._used : needed] = rows
        self._code.update(zip(pieces, range(len(self._first), len(self._first) + len(pieces))))
        self._first = np.concatenate((self._first, self._used + np.cumsum(count) - count))
        self._count = np.concatenate((self._count, count))
        self._used = needed


@dataclass(frozen=True)
class TokenBatch:
    """The token ids of many texts (``Vocabulary.encode_batch``), unpadded.

    ``table``: one row of ids per distinct token of the batch (its own id, then its n-grams' bins
    with subwords on), padded with ``PAD_ID``; ``tokens``: the ``table`` row of every token, the
    texts' tokens one text after another; ``lengths``: each text's token count."""

    table: np.ndarray
    tokens: np.ndarray
    lengths: np.ndarray
    subwords: bool

    @functools.cached_property
    def _starts(self) -> np.ndarray:
        """Where each text's tokens start in ``tokens``."""
        return np.cumsum(self.lengths) - self.lengths

    def padded(self, rows: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """The ids of the texts ``rows`` (default all, in order) as one int64 array right-padded
        with ``PAD_ID``: ``(len(rows), longest)``, or with subwords ``(len(rows), longest, most ids
        of a token)``: what ``qpr.model.encoder.pad_batch`` makes of their ``encode`` lists."""
        rows = np.arange(len(self.lengths)) if rows is None else np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        which = np.repeat(np.arange(len(rows)), lengths)
        position = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        ids = self.table[self.tokens[np.repeat(self._starts[rows], lengths) + position]]
        if not self.subwords:
            out = np.full((len(rows), int(lengths.max())), PAD_ID, dtype=np.int64)
            out[which, position] = ids[:, 0]
            return out
        widest = int(ids.any(axis=0).sum())  # a row's padding is its suffix: the columns in use are a prefix
        out = np.full((len(rows), int(lengths.max()), widest), PAD_ID, dtype=np.int64)
        out[which, position] = ids[:, :widest]
        return out
