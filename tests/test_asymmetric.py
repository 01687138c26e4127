"""Asymmetric search (issue 58): the corpus's teacher vectors beside the encoder's, queries by the
encoder alone; the scores, the label-free weight, the bundle that keeps them through save, load,
growth and re-indexing, the command line, the Python API and the app's served model."""

import json

import numpy as np
import pandas as pd
import pytest

from qpr.api.retriever import Retriever
from qpr.bundles import bundle as bundle_module
from qpr.bundles import general as general_module
from qpr.bundles.bundle import Bundle, serving_retriever
from qpr.bundles.general import build_general, rebase
from qpr.bundles.manifest import TEACHER_FILE
from qpr.cli.main import main
from qpr.errors import QPRError
from qpr.retrieval.asymmetric import MEASURED, WEIGHTS, WeightChoice, choose_weight, corpus_side, query_side
from qpr.retrieval.index import IndexConfig
from qpr.serving.served_model import Served
from tests.test_general import TINY, synthetic, tiny_domains  # noqa: F401 (a fixture)


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_the_stored_sides_score_the_weighted_sum_of_both_cosines():
    rng = np.random.default_rng(0)
    student, teacher, queries = unit(rng.normal(size=(5, 6))), unit(rng.normal(size=(5, 6))), unit(rng.normal(size=(3, 6)))
    for weight in (0.0, 0.3, 1.0):
        corpus, asked = corpus_side(student, teacher, weight), query_side(queries, weight)
        expected = (1 - weight) * queries @ student.T + weight * queries @ teacher.T
        assert np.allclose(asked @ corpus.T, expected, atol=1e-6)
        assert np.allclose(np.linalg.norm(corpus, axis=1), 1) and np.allclose(np.linalg.norm(asked, axis=1), 1)
    with pytest.raises(QPRError, match="weight"):
        query_side(queries, 1.5)
    with pytest.raises(QPRError, match="one teacher vector"):
        corpus_side(student, teacher[:4], 0.5)


def test_the_weight_is_the_one_that_agrees_most_with_the_teachers_neighbours():
    rng = np.random.default_rng(1)
    teacher = unit(np.repeat(rng.normal(size=(20, 8)), 2, axis=0) + 0.05 * rng.normal(size=(40, 8)))  # 20 close pairs
    noisy = unit(teacher + 0.6 * rng.normal(size=teacher.shape))  # a student that finds the pairs less often
    choice = choose_weight(noisy, teacher)
    assert set(choice.agreement) == {str(w) for w in WEIGHTS} and choice.questions == 40
    assert choice.agreement[str(choice.weight)] == max(choice.agreement.values())
    assert choice.agreement["1.0"] > choice.agreement["0.0"]  # the teacher's side finds its own neighbours
    assert choose_weight(teacher, teacher).weight == MEASURED  # every weight agrees: the measured one is kept


@pytest.fixture
def teacher_calls(monkeypatch):
    """A fake MiniLM of the CNN's width (a direction per topic word) in both modules that call it; the texts it was asked for."""
    rng = np.random.default_rng(0)
    calls = []

    def fake_minilm(texts, cache=None, progress=False):
        calls.append(list(texts))
        topic = {word: np.random.default_rng(len(word)).normal(size=300) for word in ("card", "account", "loan", "app", "pin", "phone")}
        return unit(np.stack([topic.get(t.split()[-1], rng.normal(size=300)) + 0.2 * rng.normal(size=300) for t in texts]))

    monkeypatch.setattr(general_module, "minilm_vectors", fake_minilm)
    monkeypatch.setattr(bundle_module, "minilm_vectors", fake_minilm)
    return calls


def test_an_asymmetric_rebase_is_kept_through_save_load_growth_and_reindexing(tiny_domains, teacher_calls, tmp_path):
    general = build_general(domains=tiny_domains, teacher=False, config=TINY, progress=False)
    users = synthetic("insurance").assign(cluster=pd.NA)
    cold = rebase(general, users, asymmetric=True)
    assert cold.asymmetric in WEIGHTS and cold.manifest.asymmetric["teacher"] == "all-MiniLM-L6-v2"
    assert cold.index.dim == 600 and cold.teacher_vectors.shape == (18, 300)
    assert cold.manifest.fusion == general.manifest.fusion  # rank fusion reads ranks alone: carried over
    cold = cold.with_teacher(cold.teacher_vectors, WeightChoice(0.5, {}, 0))  # both sides count below
    weight = cold.asymmetric
    # The dense distance is 2 - 2 * ((1 - w) cos(student, student) + w cos(student, teacher)).
    query = "how do i reset my insurance pin"
    student = unit(bundle_module.encode_with(cold.encoder, cold.vocab, [query, *users["question"]]))  # this CNN's are not unit length
    scores = (1 - weight) * student[1:] @ student[0] + weight * cold.teacher_vectors @ student[0]
    distances, qids = cold.dense_retriever().search_ids([query], 3)
    assert np.allclose(distances[0], 2 - 2 * np.sort(scores)[::-1][:3], atol=1e-4)
    assert qids[0, 0] == users["qid"].to_numpy()[scores.argmax()]

    cold.save(tmp_path / "mine")
    assert (tmp_path / "mine" / TEACHER_FILE).is_file()
    api = Retriever.load(tmp_path / "mine")
    assert api.bundle.asymmetric == weight and np.array_equal(api.bundle.teacher_vectors, cold.teacher_vectors)
    assert [h.qid for h in api.search(query, 5)] == [h.qid for h in serving_retriever(cold).search(query, 5)]
    assert Served.of(api.bundle).default.search(query, 1)[0].qid == api.search(query, 1)[0].qid  # the app serves it the same

    teacher_calls.clear()
    new = api.add(["how do i reset my insurance loan"])
    assert teacher_calls == [["how do i reset my insurance loan"]]  # the new question, encoded by the teacher
    assert api.bundle.teacher_vectors.shape == (19, 300) and len(api.bundle.index) == 19
    stored = api.bundle.index.vectors(np.array(new))[0]  # searchable under its student and teacher vectors
    assert np.allclose(stored[300:], np.sqrt(weight) * api.bundle.teacher_vectors[-1], atol=1e-5) and np.linalg.norm(stored[:300]) > 0
    api.save(tmp_path / "mine")
    grown = Bundle.load(tmp_path / "mine")
    assert grown.teacher_vectors.shape == (19, 300) and grown.asymmetric == weight
    reindexed = grown.with_index(IndexConfig("HNSW16"))
    assert reindexed.index.dim == 600 and reindexed.asymmetric == weight
    assert reindexed.dense_retriever().search_ids([query], 1)[1][0, 0] == grown.dense_retriever().search_ids([query], 1)[1][0, 0]


def test_a_bundle_without_its_teacher_file_is_refused_by_name(tiny_domains, teacher_calls, tmp_path):
    general = build_general(domains=tiny_domains, teacher=False, config=TINY, progress=False)
    rebase(general, synthetic("insurance").assign(cluster=pd.NA), asymmetric=True).save(tmp_path / "mine")
    np.save(tmp_path / "mine" / TEACHER_FILE, np.zeros((3, 300), dtype=np.float32))
    with pytest.raises(QPRError, match=TEACHER_FILE):
        Bundle.load(tmp_path / "mine")


def test_the_command_line_builds_an_asymmetric_bundle(tiny_domains, teacher_calls, tmp_path, capsys):
    build_general(domains=tiny_domains, teacher=False, config=TINY, fusion=general_module.FUSION, progress=False).save(tmp_path / "general")
    questions = tmp_path / "mine.csv"
    synthetic("insurance").drop(columns=["split"]).assign(cluster="").to_csv(questions, index=False)
    assert main(["rebase", str(tmp_path / "general"), "--corpus", str(questions), "--out", str(tmp_path / "mine"),
                 "--asymmetric", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["asymmetric"]["weight"] in WEIGHTS and Bundle.load(tmp_path / "mine").asymmetric == printed["asymmetric"]["weight"]
    assert printed["fusion_choice"]["chosen"] in printed["fusion_choice"]["agreement_at_1"]
