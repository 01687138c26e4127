"""Question paraphrase retrieval after Bonadiman, Kumar & Mittal (2019).

Data flows one way: clusters of questions (``qpr.data``, ``qpr.supervise``) train a CNN encoder
(``qpr.encoder``, ``qpr.losses``, ``qpr.train``) whose vectors fill a FAISS index (``qpr.index``);
``qpr.bundle`` saves both with the corpus, ``qpr.service`` answers queries and ``qpr.evaluate``
measures them. ``python -m qpr --help`` lists the command-line entry points.
"""

from qpr.errors import QPRError

__all__ = ["QPRError"]
