"""The system registry (qpr.systems.registry): every registered system trains, saves and loads
through it with its own files; an unknown name is refused naming the known ones; the train
command's options and the settings helper (qpr.systems.settings_dicts) behave as the registry needs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import make_corpus, tiny_transformer_settings
from qpr.bundles.bundle import Bundle, is_bundle
from qpr.bundles.training import train_system_bundle
from qpr.cli.main import build_parser
from qpr.errors import QPRError
from qpr.model.encoder import EncoderConfig
from qpr.model.text import TextConfig
from qpr.retrieval.index import IndexConfig
from qpr.systems.question_encoder import EncoderSettings
from qpr.bundles.manifest import BM25_FOLDER, CARD_FILES
from qpr.systems.registry import REGISTRY, Run, system_named, train_options
from qpr.systems import static
from qpr.systems.seed_encoders import SeedSettings
from qpr.systems.static import StaticSettings, distilled_table
from qpr.systems.settings_dicts import dataclass_from, recorded_settings
from qpr.training.train import TrainConfig

LAYERS = {"embedding_dim": 16, "channels": 16, "output_dim": 8}
TRAIN = TrainConfig(batch_size=16, max_epochs=1, val_pairs=100)
SEEDS = SeedSettings(film_rank=8, film_iterations=10, word_dim=16, epochs=2, patience=1)
SMALL = {
    "cnn-sdml": EncoderSettings(TRAIN, TextConfig(vocab_size=200), EncoderConfig(**LAYERS)),
    "lstm": EncoderSettings(TRAIN, TextConfig(vocab_size=200), EncoderConfig(**LAYERS, architecture="lstm", pooling="mean")),
    "film": SEEDS, "idf-embed": SEEDS, "fcrr": SEEDS, "convrr": SEEDS, "static": StaticSettings(epochs=1, batch_size=16),
}
NEEDS = {"idf-embed": "gensim", "fcrr": "gensim", "convrr": "gensim", "transformer": "sentence_transformers"}


@pytest.fixture
def static_teacher(monkeypatch):
    """The static student's teacher at a test's size: 6 tokens of the corpus's words and 8-d random vectors."""
    rng = np.random.default_rng(0)
    tokens = ["[PAD]", "[UNK]", "how", "do", "i", "what"]
    monkeypatch.setattr(static, "static_student", lambda dims, seed, progress=False: distilled_table(tokens, rng.normal(size=(6, 8)), 4))
    monkeypatch.setattr(static, "minilm_vectors", lambda texts, progress=False: rng.normal(size=(len(texts), 8)).astype(np.float32))


def test_every_system_a_bundle_can_hold_is_registered():
    assert set(REGISTRY) == set(SMALL) | {"transformer"}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_system_round_trips_through_save_and_load_with_its_own_files(name, request, tmp_path):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    if name == "static":
        request.getfixturevalue("static_teacher")
    system = system_named(name)
    settings = (tiny_transformer_settings(str(request.getfixturevalue("sentence_model"))) if name == "transformer"
                else SMALL[name])
    corpus = make_corpus()
    trained = train_system_bundle(corpus, name, settings, IndexConfig("Flat"), Run(progress=False), fuse=False)
    path = trained.save(tmp_path / name)

    # Its own files, the model card and config every bundle with an encoder carries for the Hub,
    # and the corpus' BM25 index.
    assert {entry.name for entry in path.iterdir()} == ({file.split("/")[0] for file in system.files} | set(CARD_FILES)
                                                        | {BM25_FOLDER})
    assert all((path / file).is_file() for file in system.files) and is_bundle(path)
    loaded = Bundle.load(path)
    assert (loaded.system, loaded.version, loaded.manifest.training.keys()) == (name, trained.version, trained.manifest.training.keys())
    texts = corpus["question"].head(5).tolist()
    assert np.allclose(loaded.encode(texts), trained.encode(texts), atol=1e-5)
    for file in system.files:  # each of its files is one the bundle cannot do without
        moved = (path / file).rename(tmp_path / "aside")
        with pytest.raises(QPRError, match=f"missing {file}"):
            Bundle.load(path)
        moved.rename(path / file)


def test_an_unknown_system_is_refused_naming_the_known_ones(tiny_bundle, tmp_path):
    with pytest.raises(QPRError, match="unknown system 'bert'; this version knows " + ", ".join(REGISTRY)):
        system_named("bert")
    path = tiny_bundle.save(tmp_path / "b")
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps(manifest | {"system": "bert"}))
    with pytest.raises(QPRError, match=r"manifest.json: unknown system 'bert'; this version knows cnn-sdml, lstm"):
        Bundle.load(path)


def test_every_option_a_system_reads_is_an_option_of_train():
    train = build_parser().parse_args(["train", "--data", "d", "--out", "o"])
    assert [name for name in train_options() if not hasattr(train, name)] == []


def test_a_system_s_own_options_reach_its_settings_and_its_default_fills_the_rest():
    from qpr.cli.commands import train_settings, train_system

    args = build_parser().parse_args(["train", "--data", "d", "--out", "o", "--system", "fcrr", "--word-dim", "12"])
    settings = train_settings(args, train_system(args))
    assert settings == SeedSettings(word_dim=12)


def test_dataclass_from_keeps_the_fields_and_names_a_value_of_the_wrong_type():
    assert dataclass_from(TrainConfig, {"lr": 1, "patience": 3, "film_rank": 8}, "x") == TrainConfig(lr=1, patience=3)
    assert dataclass_from(EncoderConfig, {"windows": [2, 4]}, "x").windows == (2, 4)  # JSON keeps tuples as lists
    with pytest.raises(QPRError, match="the options: patience is '3', not int"):
        dataclass_from(TrainConfig, {"patience": "3"}, "the options")
    with pytest.raises(QPRError, match="patience is True, not int"):
        dataclass_from(TrainConfig, {"patience": True}, "the options")
    with pytest.raises(QPRError, match="the options: a list, not an object of settings"):
        dataclass_from(TrainConfig, [], "the options")
    with pytest.raises(QPRError, match="max_epochs and patience must be at least 1"):  # the dataclass's own check
        dataclass_from(TrainConfig, {"patience": 0}, "the options")


def test_recorded_settings_say_the_record_is_not_one_this_version_reads_and_how_to_fix_it():
    with pytest.raises(QPRError, match=r"^m.json: settings is not one this version reads \(epochs is 'x', not int\); fix$"):
        recorded_settings(SeedSettings, {"epochs": "x"}, "m.json: settings", "fix")
    with pytest.raises(QPRError, match=r"is not one this version reads \(.*must be at least 1.*\); fix$"):
        recorded_settings(SeedSettings, {"epochs": 0}, "m.json: settings", "fix")
