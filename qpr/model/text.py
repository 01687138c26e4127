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
import json
import re
import zlib
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from qpr.errors import QPRError, one_line

# A token is a run of word characters (letters, digits, underscore in any script) or a single
# character that is neither a word character nor whitespace (punctuation, symbols, emoji).
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)

_WORD = re.compile(r"\w+", re.UNICODE)

PAD_ID = 0
MAX_QUERY_CHARS = 2000
MAX_K = 1000

_SURROGATE = re.compile("[\ud800-\udfff]")


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
