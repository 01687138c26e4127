import numpy as np
import pytest
import torch

from qpr.model.encoder import PAPER_ENCODER, EncoderConfig, QuestionEncoder, encode_ids, encode_texts, pad_batch
from qpr.errors import QPRError
from qpr.model.text import Vocabulary

SMALL = EncoderConfig(embedding_dim=16, windows=(5,), channels=8, output_dim=6)


def test_output_shape_and_defaults():
    assert EncoderConfig() == EncoderConfig(embedding_dim=300, windows=(1, 3, 5), channels=300, output_dim=300)
    assert PAPER_ENCODER == EncoderConfig(windows=(5,))
    encoder = QuestionEncoder(50, SMALL)
    assert encoder(torch.tensor([[3, 4, 5], [6, 0, 0]])).shape == (2, 6)


def test_normalized_encoder_outputs_unit_vectors():
    encoder = QuestionEncoder(50, EncoderConfig(embedding_dim=16, channels=8, output_dim=6, normalize=True))
    norms = encoder(torch.tensor([[3, 4, 5], [6, 0, 0]])).norm(dim=1)
    torch.testing.assert_close(norms, torch.ones(2))


@pytest.mark.parametrize("windows, pooling", [((5,), "max"), ((2, 3, 4), "max"), ((2, 3, 4), "max+mean")])
def test_padding_never_changes_a_vector(windows, pooling):
    torch.manual_seed(0)
    encoder = QuestionEncoder(50, EncoderConfig(embedding_dim=16, windows=windows, channels=8, output_dim=6, pooling=pooling)).eval()
    alone = encoder(torch.tensor([[7, 8]]))
    padded = encoder(pad_batch([[7, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9]]))[:1]
    torch.testing.assert_close(alone, padded)


def test_subword_batches_average_a_tokens_ids_and_ignore_their_padding():
    torch.manual_seed(0)
    encoder = QuestionEncoder(50, SMALL).eval()
    plain = torch.tensor([[5, 6, 7, 0], [9, 0, 0, 0]])
    torch.testing.assert_close(encoder(plain), encoder(plain.unsqueeze(2)))  # one id per token
    alone = encoder(pad_batch([[[5, 11, 12], [6]]]))
    padded = encoder(pad_batch([[[5, 11, 12], [6]], [[1, 2, 3, 4], [5], [6], [7]]]))[:1]
    torch.testing.assert_close(alone, padded)
    # A token's vector is the mean of its ids' embeddings: [5, 11, 12] acts as one averaged token.
    averaged = encoder.embedding.weight[[5, 11, 12]].mean(dim=0)
    assert not torch.allclose(alone, encoder(pad_batch([[[5], [6]]])))
    with torch.no_grad():
        encoder.embedding.weight[5] = averaged
    torch.testing.assert_close(alone, encoder(pad_batch([[[5], [6]]])))


def test_encode_ids_keeps_input_order_across_chunks():
    torch.manual_seed(0)
    encoder = QuestionEncoder(50, SMALL).eval()
    id_lists = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 10], [11, 12]]
    together = encode_ids(encoder, id_lists, chunk_size=2)
    one_by_one = torch.cat([encoder(torch.tensor([ids])) for ids in id_lists])
    torch.testing.assert_close(together, one_by_one)


def test_encode_texts_returns_float32_and_refuses_empty_text():
    vocab = Vocabulary.build(["how do i cook rice"])
    encoder = QuestionEncoder(vocab.size, SMALL)
    vectors = encode_texts(encoder, vocab, ["how do i cook rice", "unseen words here"])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 6)
    with pytest.raises(QPRError, match="empty"):
        encode_texts(encoder, vocab, ["fine", "?!"[:0]])


def test_invalid_config_is_refused():
    with pytest.raises(QPRError):
        EncoderConfig(windows=())
    with pytest.raises(QPRError):
        EncoderConfig(output_dim=0)


def test_max_and_mean_pooling_feeds_both_pools_of_every_window_to_the_projection():
    torch.manual_seed(0)
    config = EncoderConfig(embedding_dim=16, windows=(1, 3), channels=8, output_dim=6, pooling="max+mean")
    encoder = QuestionEncoder(50, config).eval()
    assert encoder.projection.in_features == 2 * 2 * 8
    # A one-token question's features are the same at every position: its mean pool is its max pool.
    embedded = encoder.embedding(torch.tensor([[7]])).transpose(1, 2)
    per_window = [torch.tanh(conv(embedded)[:, :, 0]) for conv in encoder.convs]
    expected = encoder.projection(torch.cat([f for f in per_window for _pool in ("max", "mean")], dim=1))
    torch.testing.assert_close(encoder(torch.tensor([[7]])), expected)
    with pytest.raises(QPRError, match="max\\+mean"):
        EncoderConfig(architecture="lstm", pooling="max+mean")


def test_the_cli_trains_a_max_and_mean_cnn_that_reloads_as_trained(tmp_path, capsys):
    from conftest import make_corpus
    from qpr.bundles.bundle import Bundle
    from qpr.cli.main import main
    from qpr.data.corpus import write_cluster_file

    data = write_cluster_file(make_corpus(), tmp_path / "clusters.jsonl")
    common = ["train", "--data", str(data), "--batch-size", "16", "--epochs", "1", "--quiet"]
    assert main(common + ["--out", str(tmp_path / "b"), "--pooling", "max+mean"]) == 0
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.encoder.config.pooling == "max+mean" and loaded.encoder.projection.in_features == 2 * 3 * 300
    assert main(common + ["--out", str(tmp_path / "c"), "--pooling", "mean"]) == 2
    assert "the CNN pools by 'max' or 'max+mean'" in capsys.readouterr().err and not (tmp_path / "c").exists()
