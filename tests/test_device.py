"""Where training and encoding run (qpr.model.device): auto is CUDA when torch sees a GPU, cuda
without one is refused with what to do, the CLI's --device and QPR_DEVICE choose it, bundles load
on the CPU. The CUDA test runs where a GPU is present (tests/conftest.py: the documented
exception to strict skips)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import CUDA_SKIP
from qpr.bundles.bundle import Bundle
from qpr.cli.main import main
from qpr.errors import QPRError
from qpr.model import device as devices
from qpr.model.encoder import encode_texts
from qpr.training.train import TrainConfig, train
from qpr.settings import settings


@pytest.fixture
def unchosen(monkeypatch):
    monkeypatch.setattr(devices, "_chosen", None)


def test_auto_is_cuda_exactly_when_torch_sees_a_gpu(monkeypatch, unchosen):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.resolve("auto") == torch.device("cuda") == devices.resolve("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve("auto") == torch.device("cpu") == devices.resolve("cpu")
    with pytest.raises(QPRError, match="no CUDA GPU here; use --device auto or cpu"):
        devices.resolve("cuda")
    with pytest.raises(QPRError, match="unknown device 'tpu'"):
        devices.resolve("tpu")


def test_qpr_device_chooses_unless_the_cli_did(monkeypatch, unchosen):
    monkeypatch.setenv("QPR_DEVICE", "cpu")
    settings.cache_clear()
    assert devices.current_device() == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    devices.use_device("cuda")
    assert devices.current_device() == torch.device("cuda")


def test_cli_device_cuda_without_a_gpu_is_one_clear_error(tiny_bundle, tmp_path, capsys, monkeypatch, unchosen):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    bundle_dir = tiny_bundle.save(tmp_path / "b")
    assert main(["index", str(bundle_dir), "--device", "cuda"]) == 2
    assert "no CUDA GPU here" in capsys.readouterr().err
    assert main(["index", str(bundle_dir), "--device", "cpu"]) == 0


def test_mixed_precision_only_on_cuda():
    assert devices.autocast(torch.device("cpu")).__class__.__name__ == "nullcontext"


@pytest.mark.needs_cuda
def test_trains_and_encodes_on_cuda_and_the_bundle_serves_from_the_cpu(tiny_corpus, tmp_path, unchosen):
    if not torch.cuda.is_available():
        pytest.skip(CUDA_SKIP)
    devices.use_device("cuda")
    result = train(tiny_corpus, TrainConfig(max_epochs=1, batch_size=16, val_pairs=200), progress=False)
    assert next(result.encoder.parameters()).device.type == "cpu", "trained encoders come back to the CPU"
    texts = tiny_corpus["question"].tolist() * (devices.BULK // len(tiny_corpus) + 1)
    on_gpu = encode_texts(result.encoder, result.vocab, texts)  # a bulk: encoded on the GPU
    devices.use_device("cpu")
    np.testing.assert_allclose(on_gpu, encode_texts(result.encoder, result.vocab, texts), atol=1e-3)
    bundle = Bundle.load(Bundle.create(result.encoder, result.vocab, tiny_corpus).save(tmp_path / "b"))
    assert next(bundle.encoder.parameters()).device.type == "cpu"
