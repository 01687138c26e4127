"""The LSTM encoder option: shapes, padding, a bundle that records and reloads it, and training."""

import numpy as np
import pytest
import torch

from qpr.bundles.bundle import Bundle
from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_texts
from qpr.errors import QPRError
from qpr.evaluation.metrics import evaluate
from qpr.retrieval.index import IndexConfig
from qpr.training.train import TrainConfig, train

SMALL = dict(embedding_dim=16, channels=12, output_dim=8)


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_lstm_shapes_and_padding_never_changes_a_vector(pooling):
    torch.manual_seed(0)
    enc = QuestionEncoder(50, EncoderConfig(architecture="lstm", pooling=pooling, **SMALL)).eval()
    short = enc(torch.tensor([[5, 6, 7]]))
    padded = enc(torch.tensor([[5, 6, 7, 0, 0, 0], [9, 8, 0, 0, 0, 0]]))
    assert padded.shape == (2, 8)
    assert torch.allclose(short[0], padded[0], atol=1e-6)
    assert sum(p.numel() for n, p in enc.named_parameters() if n.startswith("lstm")) > 0
    # Subword input (one id list per token) takes the same path.
    assert enc(torch.tensor([[[5, 11], [6, 0], [7, 12]]])).shape == (1, 8)


def test_lstm_word_order_matters_unlike_a_bag_of_words():
    torch.manual_seed(0)
    enc = QuestionEncoder(50, EncoderConfig(architecture="lstm", pooling="mean", **SMALL)).eval()
    assert not torch.allclose(enc(torch.tensor([[5, 6, 7]])), enc(torch.tensor([[7, 6, 5]])))


def test_invalid_options_are_refused():
    with pytest.raises(QPRError):
        EncoderConfig(architecture="gru")
    with pytest.raises(QPRError):
        EncoderConfig(architecture="cnn", pooling="mean")
    assert EncoderConfig().architecture == "cnn"  # default unchanged


def test_an_lstm_bundle_records_and_reloads_its_encoder(tiny_corpus, tmp_path):
    config = EncoderConfig(architecture="lstm", pooling="mean", **SMALL)
    result = train(tiny_corpus, TrainConfig(batch_size=16, max_epochs=6, patience=6, val_pairs=100),
                   encoder_config=config, progress=False)
    bundle = Bundle.create(result.encoder, result.vocab, tiny_corpus, IndexConfig("Flat"))
    assert bundle.manifest.encoder_config["architecture"] == "lstm"
    bundle.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.encoder.config == config
    texts = tiny_corpus["question"].tolist()[:10]
    assert np.allclose(encode_texts(loaded.encoder, loaded.vocab, texts), encode_texts(result.encoder, result.vocab, texts), atol=1e-6)
    # Trained with the same loss as the CNN, it learns the synthetic clusters.
    assert result.best_auc > 0.9
    assert evaluate(loaded.dense_retriever(), tiny_corpus, "test")["H10"] > 0.5


def test_bundles_without_the_new_fields_load_as_cnns(tiny_bundle, tmp_path):
    path = tiny_bundle.save(tmp_path / "old")
    import json

    manifest = json.loads((path / "manifest.json").read_text())
    for key in ("architecture", "pooling"):
        manifest["encoder_config"].pop(key)
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert Bundle.load(path).encoder.config.architecture == "cnn"


def test_the_cli_trains_an_lstm_bundle(tmp_path):
    import json

    from conftest import make_corpus
    from qpr.cli.main import main
    from qpr.data.corpus import write_cluster_file

    data = write_cluster_file(make_corpus(), tmp_path / "clusters.jsonl")
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "b"), "--batch-size", "16", "--epochs", "1",
                 "--architecture", "lstm", "--quiet"]) == 0
    config = json.loads((tmp_path / "b" / "manifest.json").read_text())["encoder_config"]
    assert config["architecture"] == "lstm" and config["pooling"] == "mean"
    assert Bundle.load(tmp_path / "b").encoder.config.architecture == "lstm"
