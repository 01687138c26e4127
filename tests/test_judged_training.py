"""Annotators' judged pairs as a training signal (issue 39): the sampler's ``JudgedPairs``, the
loss term ``judged_negative_loss`` and ``train``'s ``judged`` argument."""

import numpy as np
import pandas as pd
import pytest
import torch

from qpr.errors import QPRError
from qpr.model.encoder import EncoderConfig, encode_texts
from qpr.model.losses import judged_negative_loss, pairwise_distances
from qpr.training.sampling import JudgedPairs, cluster_members, epoch_pairs
from qpr.training.train import TrainConfig, train

SMALL = EncoderConfig(embedding_dim=32, channels=32, output_dim=16)


def judged_table(pairs):
    return pd.DataFrame(pairs, columns=["qid1", "qid2", "is_duplicate"])


def test_judged_pairs_are_corpus_rows_without_queries_or_unknown_questions(tiny_corpus):
    train_qids = tiny_corpus.loc[tiny_corpus["split"] == "train", "qid"].to_numpy()
    query_qid = tiny_corpus.loc[tiny_corpus["split"] == "test", "qid"].iloc[0]
    judged = judged_table([(train_qids[0], train_qids[1], 0), (train_qids[2], train_qids[3], 1),
                           (train_qids[0], query_qid, 0), (train_qids[0], 10**9, 1)])
    pairs = JudgedPairs.of(tiny_corpus, judged)
    row = {q: i for i, q in enumerate(tiny_corpus["qid"])}
    assert pairs.different.tolist() == [[row[train_qids[0]], row[train_qids[1]]]]
    assert pairs.same.tolist() == [[row[train_qids[2]], row[train_qids[3]]]]
    assert len(JudgedPairs.of(tiny_corpus, None)) == 0


def test_a_cannot_link_is_never_a_positive_and_a_same_pair_always_is(tiny_corpus):
    clusters = cluster_members(tiny_corpus, "train")
    first = clusters[0]
    # Two members of one cluster judged different: the clusters alone would pair them.
    different = np.array([[first[0], first[1]]])
    same = np.array([[clusters[1][0], clusters[2][0]]])
    pairs = JudgedPairs(same, different)
    rng = np.random.default_rng(0)
    for _ in range(20):
        anchors, positives, owner = pairs.positive_pairs(*epoch_pairs(clusters, rng), clusters, rng)
        taken = set(zip(anchors.tolist(), positives.tolist()))
        assert (first[0], first[1]) not in taken and (first[1], first[0]) not in taken
        added = {(clusters[1][0], clusters[2][0]), (clusters[2][0], clusters[1][0])} & taken
        assert len(added) == 1
        # The added pair belongs to its anchor's cluster, so no cluster-mate shares its batch.
        anchor = next(iter(added))[0]
        owners = owner[(anchors == anchor) & np.isin(positives, clusters[1][:1].tolist() + clusters[2][:1].tolist())]
        assert owners.tolist() == [1 if anchor == clusters[1][0] else 2]


def test_each_question_of_a_different_pair_gets_the_other_as_its_negative():
    pairs = JudgedPairs(np.zeros((0, 2), dtype=np.int64), np.array([[3, 7], [3, 9]]))
    negatives = pairs.negatives(np.array([3, 7, 9, 5]), np.random.default_rng(0))
    assert negatives[0] in (7, 9) and negatives[1:].tolist() == [3, 3, -1]
    picks = {int(pairs.negatives(np.array([3]), np.random.default_rng(seed))[0]) for seed in range(20)}
    assert picks == {7, 9}  # an anchor with several judged negatives meets each of them


def test_the_judged_term_pushes_the_judged_negative_away():
    torch.manual_seed(0)
    anchors, positives = torch.randn(4, 8), torch.randn(4, 8)
    negative = (anchors[1] + 0.01 * torch.randn(8)).unsqueeze(0).requires_grad_(True)
    close = judged_negative_loss(anchors, positives, torch.tensor([1]), negative)
    far = judged_negative_loss(anchors, positives, torch.tensor([1]), negative.detach() + 10.0)
    assert close > far
    close.backward()
    # Gradient descent moves the negative away from its anchor.
    moved = negative.detach() - 0.1 * negative.grad
    assert pairwise_distances(anchors[1:2], moved)[0, 0] > pairwise_distances(anchors[1:2], negative.detach())[0, 0]
    empty = judged_negative_loss(anchors.requires_grad_(True), positives, torch.tensor([], dtype=torch.long), negative)
    assert empty.item() == 0.0 and empty.requires_grad


def test_training_on_a_judged_different_pair_puts_it_further_apart(tiny_corpus):
    # Two members of one training cluster judged different: the clusters call them paraphrases,
    # the judgment says they are not. With the judgment the model must learn to tell them apart.
    members = cluster_members(tiny_corpus, "train")[0]
    qids = tiny_corpus["qid"].to_numpy()[members[:2]]
    judged = judged_table([(qids[0], qids[1], 0)])
    config = TrainConfig(batch_size=16, max_epochs=3, patience=3, val_pairs=100, judged_weight=5.0)

    def distance(result):
        texts = tiny_corpus["question"].to_numpy()[members[:2]].tolist()
        vectors = torch.from_numpy(encode_texts(result.encoder, result.vocab, texts))
        return pairwise_distances(vectors[:1], vectors[1:])[0, 0].item()

    without = distance(train(tiny_corpus, config, encoder_config=SMALL, progress=False))
    with_judgment = distance(train(tiny_corpus, config, encoder_config=SMALL, progress=False, judged=judged))
    assert with_judgment > without


def test_a_negative_judged_weight_is_a_clear_error():
    with pytest.raises(QPRError, match="judged_weight must be 0 or more"):
        TrainConfig(judged_weight=-1.0)


def test_a_same_pair_outside_every_cluster_trains_with_neighbour_batches(tiny_corpus, monkeypatch):
    # A question in no cluster judged the same as a cluster member: its pair has no neighbour
    # group of its own cluster, so it gets a group of its own; training must take it.
    loose = tiny_corpus.loc[tiny_corpus["cluster"].isna(), "qid"].iloc[0]
    member = tiny_corpus.loc[tiny_corpus["split"] == "train", "qid"].iloc[0]
    judged = judged_table([(loose, member, 1)])
    import qpr.training.train as train_module

    real = train_module.cluster_disjoint_batches
    sizes = []

    def recording(owner, batch_size, rng, group=None):
        sizes.append((len(owner), None if group is None else len(group)))
        return real(owner, batch_size, rng, group)

    monkeypatch.setattr(train_module, "cluster_disjoint_batches", recording)
    config = TrainConfig(batch_size=16, max_epochs=1, val_pairs=100, batching="neighbours")
    train(tiny_corpus, config, encoder_config=SMALL, progress=False, judged=judged)
    pairs_from_clusters = sum(len(c) for c in cluster_members(tiny_corpus, "train"))
    assert sizes == [(pairs_from_clusters + 1, pairs_from_clusters + 1)]
