"""DDP with gathered embeddings: 2 gloo workers x N/2 give one worker x N's loss and gradients."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from qpr.training import distributed
from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_ids
from qpr.model.losses import SDMLLoss

VOCAB_ROWS = 50
CONFIG = EncoderConfig(embedding_dim=16, channels=8, output_dim=12, windows=(1, 3))


def _batch(n: int) -> tuple[list[list[int]], list[list[int]]]:
    """``n`` paraphrase pairs of token ids, of varied lengths (encode_ids pads per chunk)."""
    rng = np.random.default_rng(7)
    make = lambda: rng.integers(1, VOCAB_ROWS, size=rng.integers(2, 9)).tolist()  # noqa: E731
    return [make() for _ in range(n)], [make() for _ in range(n)]


def _step(model: torch.nn.Module, encoder: QuestionEncoder, anchors, positives, batch: np.ndarray):
    """One training step's loss and gradients for ``batch`` (this worker's share of it)."""
    mine = distributed.local_share(batch)
    a = distributed.global_rows(encode_ids(model, [anchors[i] for i in mine], chunk_size=4))
    p = distributed.global_rows(encode_ids(model, [positives[i] for i in mine], chunk_size=4))
    loss = SDMLLoss(smoothing=0.3)(a, p)
    loss.backward()
    return loss.item(), {name: param.grad.clone() for name, param in encoder.named_parameters()}


def _worker(rank: int, world_size: int, port: int, n: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        # Different seeds on purpose: DDP must broadcast rank 0's weights to every worker.
        torch.manual_seed(rank)
        encoder = QuestionEncoder(VOCAB_ROWS, CONFIG)
        anchors, positives = _batch(n)
        loss, grads = _step(distributed.wrap(encoder), encoder, anchors, positives, np.arange(n))
        torch.save({"loss": loss, "grads": grads}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("n", [10, 9])  # 9: shares of 5 and 4 (padding for the collective)
def test_two_gloo_workers_match_one_worker_on_the_global_batch(tmp_path, n):
    mp.spawn(_worker, args=(2, _free_port(), n, str(tmp_path)), nprocs=2, join=True)
    torch.manual_seed(0)
    encoder = QuestionEncoder(VOCAB_ROWS, CONFIG)
    anchors, positives = _batch(n)
    loss, grads = _step(encoder, encoder, anchors, positives, np.arange(n))
    for rank in (0, 1):
        worker = torch.load(tmp_path / f"rank{rank}.pt")
        assert worker["loss"] == pytest.approx(loss, rel=1e-5)
        for name, grad in grads.items():
            torch.testing.assert_close(worker["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_without_gathering_the_workers_would_differ(tmp_path):
    """The check has teeth: each worker's loss on its own half alone is not the global loss."""
    torch.manual_seed(0)
    encoder = QuestionEncoder(VOCAB_ROWS, CONFIG)
    anchors, positives = _batch(10)
    whole, _ = _step(encoder, encoder, anchors, positives, np.arange(10))
    encoder.zero_grad()
    half, _ = _step(encoder, encoder, anchors, positives, np.arange(5))
    assert half != pytest.approx(whole, rel=1e-3)


def test_not_distributed_is_a_no_op():
    rows = torch.randn(3, 4)
    assert distributed.world() == (0, 1)
    assert distributed.global_rows(rows) is rows
    assert distributed.local_share(np.arange(5)).tolist() == [0, 1, 2, 3, 4]
    model = torch.nn.Linear(2, 2)
    assert distributed.wrap(model) is model
