"""Training a servable bundle, the first time or again on corrected clusters, and comparing two.

``train_system_bundle`` is fit -> index -> hybrid fusion (fitted on val) -> held-out metrics in
one call, for any system of ``qpr.systems.registry``; ``train_bundle`` is it for the CNN / LSTM,
``train_seed_bundle`` for the other papers' systems (FILM, IDF-weighted word vectors, FCRR, ConvRR:
``qpr.systems.seed_encoders``), ``train_transformer_bundle`` for the optional transformer backend
(``qpr.systems.transformer``). ``retrain_bundle`` continues a bundle's encoder on a corrected corpus
with the settings it was trained with (``System.retrain``), so old and new are comparable;
``compare_bundles`` scores two bundles, each as it is served, on the same held-out clusters.

BM25 over a corpus is built once and handed along (``bm25``): the fusion fit, the hybrid's
metrics, the comparison and the served retrievers of the new bundle all read the same one, since
a retrain changes which cluster a question is in, never the questions BM25 indexes.

``provenance`` says what a bundle was trained from (the judgment ids and the export of corrected
clusters, for a retrained one) and is kept in the manifest, so any model can be traced back to
the judgments that made it.
"""

from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from qpr.bundles.bundle import Bundle, serving_retriever
from qpr.model.encoder import EncoderConfig, QuestionEncoder
from qpr.errors import QPRError
from qpr.evaluation.metrics import evaluate, h1_change, hit_matrix, query_set, rank_metrics
from qpr.retrieval.hybrid import Fusion, HybridRetriever, fit_fusion
from qpr.retrieval.index import IndexConfig
from qpr.retrieval.lexical import BM25Retriever
from qpr.systems.question_encoder import EncoderSettings
from qpr.systems.registry import DEFAULT, Run, system_named
from qpr.systems.seed_encoders import SeedSettings
from qpr.model.text import TextConfig, Vocabulary
from qpr.training.train import TrainConfig
from qpr.systems.transformer import SYSTEM as TRANSFORMER, TransformerEncoder, TransformerSettings

HELD_OUT = ("val", "test")
METRIC_COLUMNS = ["model", "version", "split", "H1", "H10", "MRR", "queries"]
CHANGE_COLUMNS = ["H1_change", "H1_change_low", "H1_change_high"]
COMPARISON_COLUMNS = METRIC_COLUMNS + CHANGE_COLUMNS  # ``compare_bundles``' table


def held_out_splits(corpus: pd.DataFrame) -> list[str]:
    """The held-out splits of ``corpus`` that have clustered questions to query."""
    clustered = corpus[corpus["cluster"].notna()]
    return [split for split in HELD_OUT if (clustered["split"] == split).any()]


def train_system_bundle(
    corpus: pd.DataFrame,
    system: str,
    settings: Any,
    index_config: IndexConfig = IndexConfig(),
    run: Run = Run(),
    provenance: dict | None = None,
    bm25: BM25Retriever | None = None,
    fuse: bool = True,
) -> Bundle:
    """Fit the registered ``system`` with its ``settings`` on ``corpus`` as ``run`` says
    (``qpr.systems.registry``), index every question, fit the hybrid scorer on the val clusters
    (``qpr.retrieval.hybrid``; skipped, with the reason in the manifest, when val cannot support it
    or ``fuse`` is off), and record the training run and the val/test metrics of the encoder
    (``metrics``) and of the hybrid (``hybrid_metrics``) in the manifest.

    ``provenance`` says what the corpus was labelled from (module doc); ``bm25``, a BM25 retriever
    over ``corpus`` already built, saves building another.
    """
    encoder, vocab, info = system_named(system).fit(corpus, settings, run)
    bundle = Bundle.create(encoder, vocab, corpus, index_config, train_info=info)
    return _measured(bundle, corpus, provenance, bm25, fuse)


def train_bundle(
    corpus: pd.DataFrame,
    config: TrainConfig,
    text_config: TextConfig = TextConfig(),
    encoder_config: EncoderConfig = EncoderConfig(),
    index_config: IndexConfig = IndexConfig(),
    warm_start: tuple[QuestionEncoder, Vocabulary] | None = None,
    data: str = "",
    provenance: dict | None = None,
    bm25: BM25Retriever | None = None,
    fuse: bool = True,
    progress: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
    return_on_interrupt: bool = True,
    on_batch: Callable[[int, int, int], None] | None = None,
) -> Bundle:
    """``train_system_bundle`` for a CNN or an LSTM (``encoder_config.architecture``): train it on
    ``corpus`` (``qpr.training.train.train``), or continue ``warm_start``, as the rest says."""
    # The CNN and the LSTM share one fit; the bundle names the system its encoder turns out to be.
    run = Run(data, warm_start, progress, on_epoch, on_batch, return_on_interrupt)
    return train_system_bundle(corpus, DEFAULT, EncoderSettings(config, text_config, encoder_config), index_config, run,
                               provenance, bm25, fuse)


def train_seed_bundle(
    corpus: pd.DataFrame,
    system: str,
    settings: SeedSettings = SeedSettings(),
    index_config: IndexConfig = IndexConfig(),
    data: str = "",
    provenance: dict | None = None,
    bm25: BM25Retriever | None = None,
    fuse: bool = True,
    log: Callable[[dict], None] | None = None,
) -> Bundle:
    """``train_system_bundle`` for a seed system (``qpr.systems.seed_encoders``: film, idf-embed,
    fcrr, convrr), so the bundle is served, compared and retrained like a CNN's. ``log`` sees
    FILM's iterations."""
    return train_system_bundle(corpus, system, settings, index_config, Run(data, log=log), provenance, bm25, fuse)


def train_transformer_bundle(
    corpus: pd.DataFrame,
    settings: TransformerSettings = TransformerSettings(),
    index_config: IndexConfig = IndexConfig(),
    data: str = "",
    provenance: dict | None = None,
    bm25: BM25Retriever | None = None,
    fuse: bool = True,
    warm_start: TransformerEncoder | None = None,
    progress: bool = True,
    on_batch: Callable[[int, int, int], None] | None = None,
) -> Bundle:
    """``train_system_bundle`` for the transformer backend: fine-tune ``settings.base`` (or continue
    ``warm_start``) with SDML on ``corpus`` (``qpr.systems.transformer.fit_transformer``). Needs the
    extra (``qpr.systems.transformer.EXTRA``)."""
    run = Run(data, warm_start, progress, on_batch=on_batch)
    return train_system_bundle(corpus, TRANSFORMER, settings, index_config, run, provenance, bm25, fuse)


def _measured(bundle: Bundle, corpus: pd.DataFrame, provenance: dict | None, bm25: BM25Retriever | None, fuse: bool) -> Bundle:
    """``bundle`` with its provenance, the held-out metrics of its encoder and, unless ``fuse`` is off
    or val cannot support it, its fitted hybrid and that one's metrics; ``bm25`` (over ``corpus``)
    becomes its BM25, saved with it."""
    bundle = bundle.with_bm25(bm25) if bm25 is not None else bundle
    splits = held_out_splits(corpus)
    bundle = bundle.with_manifest(provenance=provenance,
                                  metrics={split: evaluate(bundle.dense_retriever(), corpus, split) for split in splits})
    if not fuse:
        return bundle.with_manifest(fusion_skipped="not asked for")
    bm25 = bundle.bm25
    try:
        bundle = bundle.with_fusion(fit_fusion(bundle.dense_retriever(), bm25=bm25).to_dict())
    except QPRError as err:
        return bundle.with_manifest(fusion_skipped=str(err))
    hybrid = HybridRetriever(bundle.dense_retriever(), Fusion.from_stored(bundle.manifest.fusion), bm25)
    return bundle.with_manifest(hybrid_metrics={split: evaluate(hybrid, corpus, split) for split in splits})


def retrain_bundle(
    bundle: Bundle,
    corpus: pd.DataFrame,
    max_epochs: int | None = None,
    provenance: dict | None = None,
    bm25: BM25Retriever | None = None,
    fuse: bool = True,
    progress: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
    return_on_interrupt: bool = True,
    on_batch: Callable[[int, int, int], None] | None = None,
    judged: pd.DataFrame | None = None,
    cluster_weights: pd.Series | None = None,
) -> Bundle:
    """A new bundle whose encoder continues ``bundle``'s on ``corpus`` (e.g. corrected clusters),
    trained as its system retrains (``System.retrain`` in ``qpr.systems.registry``).

    A CNN / LSTM continues with the settings it was trained with, with its manifest's ``retrain``
    settings put over them (a general bundle's: ``qpr.bundles.general.training_info``; ``max_epochs``
    may override); vocabulary, layer sizes and index settings stay the same, so old and new are
    comparable. The other arguments are ``train_bundle``'s.

    A seed system's bundle (FILM, IDF-embed, FCRR, ConvRR) is refitted from scratch on ``corpus``
    with its recorded settings (none of them continues from a state), its ``max_epochs`` bounding
    the residual nets' epochs; ``on_epoch`` and ``progress`` do not apply. A transformer bundle
    continues from its own model with its recorded settings, ``max_epochs`` bounding its epochs;
    ``on_epoch`` does not apply. ``judged``: the judged pairs behind ``corpus`` (the export's pairs
    table), which a CNN / LSTM trains on directly (``qpr.training.train.train``); the other systems
    learn from the corrected clusters only. ``cluster_weights``: each cluster's estimated purity (by
    name), which a CNN / LSTM retrain draws its clusters by (``qpr.training.fixed_shape``).
    """
    system = system_named(bundle.system)
    settings, warm_start = system.retrain(bundle.manifest, bundle.encoder, bundle.vocab, max_epochs)
    run = Run("corrected clusters", warm_start, progress, on_epoch, on_batch, return_on_interrupt, judged=judged,
              cluster_weights=cluster_weights)
    return train_system_bundle(corpus, system.name, settings, bundle.index.config, run, provenance, bm25, fuse)


def compare_bundles(old: Bundle, new: Bundle, corpus: pd.DataFrame, bm25: BM25Retriever | None = None) -> pd.DataFrame:
    """H@1 / H@10 / MRR of both bundles, each as it is served (``serving_retriever``), on the
    held-out clusters of ``corpus`` (the same queries and the same relevance labels for both), one
    row per model and split (``METRIC_COLUMNS``); the retrained rows also carry the change in H@1
    and its 95% paired bootstrap interval (``qpr.evaluation.metrics.h1_change``). ``bm25``: a BM25 retriever
    over ``corpus``'s questions, built here if not given."""
    splits = held_out_splits(corpus)
    if not splits:
        raise QPRError("the corpus has no val or test clusters: nothing held out to compare the models on")
    bm25 = bm25 or BM25Retriever(corpus)
    retrievers = {"current": serving_retriever(old, bm25), "retrained": serving_retriever(new, bm25)}
    hits = {split: {name: hit_matrix(retriever, corpus, query_set(corpus, split)) for name, retriever in retrievers.items()}
            for split in splits}
    changes = {split: dict(zip(CHANGE_COLUMNS, h1_change(hits[split]["current"], hits[split]["retrained"]))) for split in splits}
    rows = [
        {"model": name, "version": bundle.version, "split": split} | rank_metrics(hits[split][name])
        | (changes[split] if name == "retrained" else {})
        for name, bundle in (("current", old), ("retrained", new))
        for split in splits
    ]
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


# Held-out queries under which a comparison says nothing either way: one query is then 5 points
# of H@1 or more, and the bootstrap interval of so few is itself unreliable.
FEW_QUERIES = 20


def verdict(comparison: pd.DataFrame) -> tuple[str, bool]:
    """In words, whether the retrained model of ``compare_bundles``' table is better on held-out
    data and by how much (test split, else val), and whether it is worse beyond doubt."""
    retrained = comparison[comparison["model"] == "retrained"].set_index("split")
    split = "test" if "test" in retrained.index else retrained.index[0]
    row = retrained.loc[split]
    change, low, high = (100 * row[key] for key in CHANGE_COLUMNS)
    span = f"{change:+.1f} points of H@1 on {int(row['queries'])} held-out {split} queries (95% interval {low:+.1f} to {high:+.1f})"
    if row["queries"] < FEW_QUERIES:
        return (f"Too few held-out queries to judge: {span}. With under {FEW_QUERIES} queries a single one moves H@1 by "
                f"{100 / max(int(row['queries']), 1):.0f} points or more; add clusters (or questions to them) before "
                "trusting any difference."), False
    if low > 0:
        return f"The retrained model is better: {span}.", False
    if high < 0:
        return f"The retrained model is worse: {span}. Discard it unless you know why.", True
    return (f"No clear difference: {span}; the interval includes zero, so the queries cannot tell this change "
            "from luck. Retraining the same clusters with another batch order alone moved Quora-lite's test H@1 by "
            "about 2 points (docs/FEEDBACK_LOOP.md)."), False
