"""Question paraphrase retrieval after Bonadiman, Kumar & Mittal (2019): the engine, with no
Gradio and no SQL.

``from qpr import Retriever`` is the Python API (``qpr.api``): load a bundle from a folder or
the Hugging Face Hub, search, encode, add questions, save (README, "From Python").

Its parts, one sub-package each, in the order data flows through them:

- ``qpr.data``: questions and clusters (corpora, uploads, question->answer logs, distant supervision)
- ``qpr.model``: tokenizer with the hashing trick, the CNN encoder, losses
- ``qpr.training``: the sampler and the SDML fit (several processes, distillation)
- ``qpr.systems``: the other encoder systems a bundle can hold (the other papers', a transformer)
- ``qpr.retrieval``: the FAISS index, dense, BM25 and hybrid retrievers
- ``qpr.bundles``: a trained model on disk; training, retraining and the general bundle
- ``qpr.serving``: what the app serves, projects on disk, background training
- ``qpr.evaluation``: H@1, MRR, ROC AUC
- ``qpr.api``: ``Retriever``, the public API over a bundle
- ``qpr.fsutil``: crash-safe writes; ``qpr.cli``: the ``qpr`` command
- ``qpr.settings``: every environment variable, read once; ``qpr.errors``: the error a user can fix

``qpr.research`` holds protocols that only the benchmarks run. docs/ARCHITECTURE.md maps the
whole project; ``qpr --help`` lists the command-line entry points.
"""

import importlib
import os

from qpr.errors import QPRError

# bm25s (our BM25) runs a JAX top-k as it is imported whenever JAX is installed; on a GPU machine
# that takes three quarters of the GPU's memory in every process importing it, so a second process
# (or torch's training beside it) runs out (seen on a lent H200: five benchmark processes, four
# failed). bm25s only ever gets CPU arrays from us; a user who sets JAX_PLATFORMS keeps theirs.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

__all__ = ["Hit", "QPRError", "Retriever"]

# The API's names load on first use (PEP 562). Importing them here made every ``import
# qpr.<anything>`` load torch, FAISS and every system (3.4 s on the 2-core machine), which the
# annotation store's processes, needing only ``qpr.errors`` and the data helpers, paid for nothing.
_LAZY = {"Hit": "qpr.retrieval.base", "Retriever": "qpr.api.retriever"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'qpr' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
