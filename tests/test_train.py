from collections import Counter
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
import torch

from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_ids, encode_texts
from qpr.errors import QPRError
from qpr.evaluation.metrics import evaluate
from qpr.bundles.bundle import Bundle
from qpr.retrieval.index import IndexConfig
from qpr.model.text import TextConfig
from qpr.training.sampling import (
    all_pairs, batch_units, cluster_disjoint_batches, cluster_members, epoch_pairs, neighbour_groups, unlabeled_rows,
    validation_pairs, view_pairs,
)
from qpr.training.train import TrainConfig, train

SMALL = EncoderConfig(embedding_dim=32, channels=32, output_dim=16)
FAST = TrainConfig(batch_size=16, max_epochs=2, patience=2, val_pairs=100)


def test_epoch_pairs_stay_inside_clusters(tiny_corpus):
    clusters = cluster_members(tiny_corpus, "train")
    anchors, positives, owner = epoch_pairs(clusters, np.random.default_rng(0))
    assert len(anchors) == sum(len(c) for c in clusters)
    assert (anchors != positives).all()
    cluster = tiny_corpus["cluster"].to_numpy()
    assert (cluster[anchors] == cluster[positives]).all()


def test_all_pairs_takes_each_pair_of_a_cluster_once_in_either_direction():
    # Clusters of 5, 3 and eleven of 2 (10 + 3 + 11 pairs) in batches of 2: 12 batches, room for
    # the 10 pairs of the biggest cluster.
    clusters = [np.arange(5), np.arange(5, 8)] + [8 + 2 * i + np.arange(2) for i in range(11)]
    anchors, positives, owner = all_pairs(clusters, 2, np.random.default_rng(0))
    expected = {frozenset(pair) for members in clusters for pair in combinations(members.tolist(), 2)}
    taken = [frozenset(pair) for pair in zip(anchors.tolist(), positives.tolist())]
    assert len(taken) == len(expected) == 24 and set(taken) == expected
    assert all(owner[i] == next(c for c, m in enumerate(clusters) if anchors[i] in m) for i in range(len(owner)))
    assert (anchors < positives).any() and (anchors > positives).any()  # both directions occur


def test_all_pairs_caps_a_cluster_at_the_epochs_batch_count():
    # One cluster of 30 (435 pairs) beside 20 of 3 (60 pairs), batches of 16: capped at 5, the
    # epoch's 65 pairs fill 5 batches, each with one pair of the big cluster. (A cap from the
    # uncapped 495 pairs, 31, would leave 26 of its pairs alone in batches without negatives.)
    clusters = [np.arange(30)] + [30 + 3 * i + np.arange(3) for i in range(20)]
    anchors, positives, owner = all_pairs(clusters, 16, np.random.default_rng(0))
    big = owner == 0
    sampled = {frozenset(p) for p in zip(anchors[big].tolist(), positives[big].tolist())}
    assert big.sum() == 5 and len(sampled) == 5 and all(len(p) == 2 and max(p) < 30 for p in sampled)
    assert (~big).sum() == 60
    batches = cluster_disjoint_batches(owner, 16, np.random.default_rng(0))
    assert len(batches) == 5 and sum(len(b) for b in batches) == len(owner)


def test_all_pairs_keeps_every_pair_when_clusters_are_fewer_than_the_batch_size():
    # 10 clusters of 5 with batches of 16: a batch holds at most 10 pairs (one per cluster), so
    # the 100 pairs make 10 full batches and no cluster is capped.
    clusters = [5 * i + np.arange(5) for i in range(10)]
    anchors, _, owner = all_pairs(clusters, 16, np.random.default_rng(0))
    assert len(anchors) == 100 and (np.bincount(owner) == 10).all()
    batches = cluster_disjoint_batches(owner, 16, np.random.default_rng(0))
    assert sorted(len(b) for b in batches) == [10] * 10


def test_training_on_all_pairs_feeds_every_pair_of_every_cluster_once_per_epoch(tiny_corpus, monkeypatch):
    encoded = []
    real_encode = encode_ids

    def recording_encode(encoder, id_lists, *args, **kwargs):
        encoded.append([repr(ids) for ids in id_lists])
        return real_encode(encoder, id_lists, *args, **kwargs)

    monkeypatch.setattr("qpr.training.train.encode_ids", recording_encode)
    config = TrainConfig(batch_size=16, max_epochs=1, val_pairs=100, pairs="all")
    result = train(tiny_corpus, config, encoder_config=SMALL, progress=False)
    ids = {row: repr(result.vocab.encode(q)) for row, q in enumerate(tiny_corpus["question"])}
    expected = Counter(frozenset((ids[a], ids[b])) for members in cluster_members(tiny_corpus, "train")
                       for a, b in combinations(members.tolist(), 2))
    fed = Counter(frozenset(pair) for anchors, positives in zip(encoded[::2], encoded[1::2])
                  for pair in zip(anchors, positives))
    # Each of the 24 clusters' 10 pairs at most once; only a last batch left with a single pair
    # (no negative) is dropped, as in partner mode.
    assert set(fed) <= set(expected) and max(fed.values()) == 1 and len(expected) == 240 and len(fed) >= 239
    with pytest.raises(QPRError, match="pairs"):
        TrainConfig(pairs="every")


def test_batches_never_hold_two_pairs_of_one_cluster():
    owner = np.repeat(np.arange(50), np.random.default_rng(1).integers(2, 30, size=50))
    batches = cluster_disjoint_batches(owner, 16, np.random.default_rng(0))
    assert all(len(b) <= 16 and len(set(owner[b])) == len(b) for b in batches)
    used = np.concatenate(batches)
    assert len(used) == len(set(used))
    assert len(used) >= len(owner) - 30  # only leftovers of the biggest cluster can be dropped


def test_grouped_batches_put_a_groups_clusters_together_and_stay_cluster_disjoint():
    # 40 groups, each of two clusters of 3 pairs: ordinary batching rarely puts a group's two
    # clusters in one batch of 8; grouped batching almost always does.
    owner = np.repeat(np.arange(80), 3)
    group = owner // 2

    def together(batches):
        return np.mean([len(set(owner[b][group[b] == g])) == 2 for b in batches for g in set(group[b])])

    rng = np.random.default_rng(0)
    grouped = cluster_disjoint_batches(owner, 8, rng, group)
    plain = cluster_disjoint_batches(owner, 8, np.random.default_rng(0))
    for batches in (grouped, plain):
        assert sorted(np.concatenate(batches)) == list(range(len(owner)))
        assert all(len(set(owner[b])) == len(b) for b in batches)
    assert together(grouped) > 0.8 > 0.3 > together(plain)


def test_grouped_batches_mix_unrelated_clusters_afresh_in_each_batch():
    # 200 groups of two clusters of 4 pairs, batches of 16: each cluster lands in 4 batches. A
    # batcher that fills batches group after group would put the same unrelated clusters beside
    # each other in all 4 (every such meeting repeated 4 times); dealing each group's rounds
    # independently makes two unrelated clusters meet about once.
    owner = np.repeat(np.arange(400), 4)
    group = owner // 2
    meetings = Counter()
    for batch in cluster_disjoint_batches(owner, 16, np.random.default_rng(0), group):
        clusters = sorted(set(owner[batch].tolist()))
        meetings.update((x, y) for x, y in combinations(clusters, 2) if x // 2 != y // 2)
    assert np.mean(list(meetings.values())) < 1.2


def test_batch_units_are_one_groups_distinct_clusters_and_cover_every_pair_once():
    owner = np.repeat(np.arange(30), np.random.default_rng(2).integers(2, 9, size=30))
    group = owner % 4
    units = batch_units(owner, 5, np.random.default_rng(0), group)
    assert sorted(p for unit in units for p in unit) == list(range(len(owner)))
    for unit in units:
        assert 1 <= len(unit) <= 5
        assert len(set(owner[unit])) == len(unit) and len(set(group[unit])) == 1
    assert [len(u) for u in batch_units(owner, 5, np.random.default_rng(0))] == [1] * len(owner)


def test_neighbour_groups_put_alike_clusters_together():
    # Clusters 0-19 are made of one word, clusters 20-39 of another: two groups of 20 (batch size
    # 20) must split exactly there, whatever the (untrained) encoder maps the words to.
    torch.manual_seed(0)
    encoder = QuestionEncoder(10, SMALL)
    token_ids = [[3, 3]] * 40 + [[7, 7]] * 40
    clusters = [np.array([2 * c, 2 * c + 1]) for c in range(40)]
    group = neighbour_groups(encoder, token_ids, clusters, batch_size=20, seed=0)
    assert len(set(group[:20])) == 1 and len(set(group[20:])) == 1 and group[0] != group[20]
    assert encoder.training  # left as it was found
    assert set(neighbour_groups(encoder, token_ids, clusters, batch_size=30, seed=0)) == {0}  # fewer than 2 groups


def test_neighbour_batching_trains_and_excludes_fixed_groups(tiny_corpus):
    config = TrainConfig(batching="neighbours", batch_size=4, max_epochs=1, val_pairs=100)
    assert len(train(tiny_corpus, config, encoder_config=SMALL, progress=False).history) == 1
    with pytest.raises(QPRError, match="use one"):
        train(tiny_corpus, config, batch_groups=tiny_corpus["cluster"], progress=False)
    with pytest.raises(QPRError, match="unknown batching"):
        TrainConfig(batching="hard")


def test_validation_negatives_come_from_other_clusters(tiny_corpus):
    a, b, labels = validation_pairs(tiny_corpus, 50, seed=0)
    cluster_of = dict(zip(tiny_corpus["question"], tiny_corpus["cluster"]))
    same = np.array([cluster_of[x] == cluster_of[y] for x, y in zip(a, b)])
    assert (same == labels.astype(bool)).all() and labels.mean() == 0.5


def test_training_learns_and_beats_an_untrained_encoder(tiny_bundle):
    corpus = tiny_bundle.corpus
    trained = evaluate(tiny_bundle.dense_retriever(), corpus, "test")
    torch.manual_seed(0)
    random_encoder = QuestionEncoder(tiny_bundle.vocab.size, SMALL)
    untrained = evaluate(Bundle.create(random_encoder, tiny_bundle.vocab, corpus, IndexConfig("Flat")).dense_retriever(), corpus, "test")
    history = tiny_bundle.manifest.training["history"]
    assert history[-1]["loss"] < history[0]["loss"]
    assert trained["MRR"] > untrained["MRR"] + 0.2


def test_same_seed_same_model(tiny_corpus):
    runs = [train(tiny_corpus, FAST, encoder_config=SMALL, progress=False) for _ in range(2)]
    for p, q in zip(runs[0].encoder.parameters(), runs[1].encoder.parameters()):
        assert torch.equal(p, q)


def test_early_stopping_keeps_the_best_epoch(tiny_corpus):
    frozen = TrainConfig(batch_size=16, max_epochs=5, patience=1, lr=0.0, val_pairs=100)
    result = train(tiny_corpus, frozen, encoder_config=SMALL, progress=False)
    assert result.stopped == "early_stopping"
    assert len(result.history) == 2 and result.best_epoch == 1


def test_ctrl_c_returns_the_best_epoch_so_far(tiny_corpus):
    def interrupt_after_second(row):
        if row["epoch"] == 2:
            raise KeyboardInterrupt

    result = train(tiny_corpus, TrainConfig(batch_size=16, max_epochs=5, val_pairs=100), encoder_config=SMALL,
                   on_epoch=interrupt_after_second, progress=False)
    assert result.stopped == "interrupted" and len(result.history) == 2
    assert result.best_epoch in (1, 2)


def test_ctrl_c_before_any_epoch_propagates(tiny_corpus, monkeypatch):
    import qpr.training.train as module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "pair_auc", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_corpus, FAST, encoder_config=SMALL, progress=False)


def test_warm_start_keeps_the_vocabulary(tiny_bundle):
    result = train(tiny_bundle.corpus, FAST, warm_start=(tiny_bundle.encoder, tiny_bundle.vocab), progress=False)
    assert result.vocab is tiny_bundle.vocab
    assert result.encoder is not tiny_bundle.encoder


@pytest.mark.parametrize("loss, negatives", [("triplet", "random"), ("triplet", "hard")])
def test_triplet_baselines_train(tiny_corpus, loss, negatives):
    config = TrainConfig(loss=loss, distance="euclidean", negatives=negatives, batch_size=16, max_epochs=1, val_pairs=100)
    assert len(train(tiny_corpus, config, encoder_config=SMALL, progress=False).history) == 1


@pytest.fixture
def optimizers(monkeypatch):
    """The Adam optimizers that training creates, recorded as they are made."""
    made = []

    class Recording(torch.optim.Adam):
        def __init__(self, params, **kwargs):
            super().__init__(params, **kwargs)
            made.append(self)

    monkeypatch.setattr(torch.optim, "Adam", Recording)
    return made


def test_cosine_training_optimises_the_temperature_and_needs_unit_vectors(tiny_corpus, optimizers):
    config = TrainConfig(distance="cosine", batch_size=16, max_epochs=1, val_pairs=100)
    unit = EncoderConfig(embedding_dim=32, channels=32, output_dim=16, normalize=True)
    result = train(tiny_corpus, config, encoder_config=unit, progress=False)
    scalars = [p for group in optimizers[0].param_groups for p in group["params"] if p.ndim == 0]
    assert len(scalars) == 1 and scalars[0].item() != pytest.approx(np.log(20.0))  # the scale was trained
    vectors = result.encoder(torch.tensor([[5, 6, 7]]))
    torch.testing.assert_close(vectors.norm(dim=1), torch.ones(1))
    with pytest.raises(QPRError, match="normalize=True"):
        train(tiny_corpus, config, encoder_config=SMALL, progress=False)


def test_cosine_schedule_decays_the_learning_rate_to_zero(tiny_corpus, optimizers):
    config = TrainConfig(lr_schedule="cosine", batch_size=16, max_epochs=2, val_pairs=100)
    train(tiny_corpus, config, encoder_config=SMALL, progress=False)
    assert optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-5)
    with pytest.raises(QPRError, match="lr_schedule"):
        TrainConfig(lr_schedule="linear")


def test_missing_train_or_val_clusters_is_a_clear_error(tiny_corpus):
    with pytest.raises(QPRError, match="no training clusters"):
        train(tiny_corpus.assign(split="test"), FAST, progress=False)
    no_val = tiny_corpus.assign(split=tiny_corpus["split"].replace("val", "test"))
    with pytest.raises(QPRError, match="0 validation cluster"):
        train(no_val, FAST, progress=False)
    val_clusters = sorted(tiny_corpus.loc[tiny_corpus["split"] == "val", "cluster"].unique())
    one_val = tiny_corpus.assign(split=tiny_corpus["split"].mask(tiny_corpus["cluster"].isin(val_clusters[1:]), "test"))
    with pytest.raises(QPRError, match="1 validation cluster"):
        train(one_val, FAST, progress=False)
    with pytest.raises(QPRError, match="batch_size"):
        TrainConfig(batch_size=1)


def test_ctrl_c_can_be_asked_to_propagate(tiny_corpus):
    def interrupt_after_first(row):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tiny_corpus, FAST, encoder_config=SMALL, on_epoch=interrupt_after_first, progress=False,
              return_on_interrupt=False)


def test_subword_training_round_trips_through_a_bundle(tiny_corpus, tmp_path):
    result = train(tiny_corpus, FAST, TextConfig(subword_ngrams=3), SMALL, progress=False)
    Bundle.create(result.encoder, result.vocab, tiny_corpus, IndexConfig("Flat")).save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.vocab.config.subword_ngrams == 3
    queries = ["how do i lern pythn?", tiny_corpus["question"].iloc[0]]
    expected = encode_texts(result.encoder, result.vocab, queries)
    np.testing.assert_allclose(loaded.dense_retriever().encode(queries), expected, rtol=1e-5, atol=1e-6)


def test_unlabeled_rows_are_the_unpaired_non_query_questions_once_per_text(tiny_corpus):
    corpus = pd.concat([tiny_corpus, pd.DataFrame({
        "qid": [900, 901, 902], "question": ["is number 3 a lucky number ?", "a val question alone", "a lone train one"],
        "cluster": pd.array([None, None, "c-lone"], dtype="string"), "split": ["none", "val", "train"],
    })], ignore_index=True)
    rows = unlabeled_rows(corpus, cluster_members(corpus, "train"))
    distractors = np.flatnonzero((tiny_corpus["split"] == "none").to_numpy())
    # The repeated distractor text counts once; val questions are queries; a one-question train
    # cluster anchors no pair, so it is material too.
    assert rows.tolist() == distractors.tolist() + [len(corpus) - 1]


def test_views_drop_tokens_but_never_all_of_them():
    ids = [[3, 4, 5, 6, 7, 8], [9], [[1, 2], [3]]]
    first, second = view_pairs(ids, 0.5, np.random.default_rng(0))
    for original, a, b in zip(ids, first, second):
        for view in (a, b):
            assert view and all(token in original for token in view)
    assert view_pairs(ids, 0.5, np.random.default_rng(0)) == (first, second)  # seeded
    assert view_pairs(ids, 0.0, np.random.default_rng(1)) == (ids, ids)
    assert first != second


def test_unlabeled_questions_join_training_as_pairs_of_their_own_two_views(tiny_corpus, monkeypatch):
    made, encoded = [], []
    real_views, real_encode = view_pairs, encode_ids

    def recording_views(id_lists, dropout, rng):
        out = real_views(id_lists, dropout, rng)
        made.append((id_lists, *out))
        return out

    def recording_encode(encoder, id_lists, *args, **kwargs):
        encoded.append(list(id_lists))
        return real_encode(encoder, id_lists, *args, **kwargs)

    monkeypatch.setattr("qpr.training.train.view_pairs", recording_views)
    monkeypatch.setattr("qpr.training.train.encode_ids", recording_encode)
    config = TrainConfig(batch_size=16, max_epochs=1, val_pairs=100, unlabeled_dropout=0.3)
    result = train(tiny_corpus, config, encoder_config=SMALL, progress=False)
    originals, first, second = made[0]
    rows = unlabeled_rows(tiny_corpus, cluster_members(tiny_corpus, "train"))
    assert originals == [result.vocab.encode(q) for q in tiny_corpus["question"].to_numpy()[rows]]
    # Training encodes anchors then positives for each batch: every first view is an anchor exactly
    # once, with the second view of the same question at the same position among the positives.
    seen = 0
    for anchors, positives in zip(encoded[::2], encoded[1::2]):
        for a, p in zip(anchors, positives):
            if a in first:
                i = first.index(a)
                assert p == second[i]
                seen += 1
    assert seen == len(rows)
    with pytest.raises(QPRError, match="unlabeled_dropout"):
        TrainConfig(unlabeled_dropout=1.0)
