"""Question paraphrase retrieval after Bonadiman, Kumar & Mittal (2019).

Data flows one way: clusters of questions (``qpr.data``, ``qpr.supervise``) train a CNN encoder
(``qpr.encoder``, ``qpr.losses``, ``qpr.sampling``, ``qpr.train``) whose vectors fill a FAISS index
(``qpr.index``); ``qpr.bundle`` saves both with the corpus, ``qpr.bundle_training`` trains and
retrains a whole bundle, ``qpr.retrievers`` (and ``qpr.hybrid``) answer queries, ``qpr.serving``
holds what the app serves and swaps a retrained model in, and ``qpr.evaluate`` measures them.
ARCHITECTURE.md (in docs/) maps the whole project. ``python -m qpr --help`` lists the command-line entry points.
"""

from qpr.errors import QPRError

__all__ = ["QPRError"]
