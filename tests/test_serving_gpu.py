"""The GPU benchmark (bench.serving_gpu) runs end to end as a CPU dry run, writes every phase's
figures, and only a file measured on CUDA becomes serving.json's ``gpu`` row (bench.serving
gpu-merge): it runs once on a lent machine, so it must not fail there for a reason found here."""

from __future__ import annotations

import json
import sys

import pytest

from bench import serving, serving_gpu
from qpr.data.corpus import write_table


def test_dry_run_writes_every_phase_and_merge_refuses_it(tiny_corpus, tmp_path, monkeypatch):
    corpus = write_table(tiny_corpus, tmp_path / "corpus.parquet")
    out = tmp_path / "gpu.json"
    monkeypatch.setattr(sys, "argv", ["bench.serving_gpu", "--out", str(out), "--corpus", str(corpus), "--device", "cpu",
                                      "--epochs", "2", "--cpu-epochs", "1", "--encode", "5000", "--cpu-encode", "4096",
                                      "--cpu-threads", "1"])
    serving_gpu.main()
    measured = json.loads(out.read_text())
    assert measured["errors"] == {}
    assert measured["machine"]["type"] == "cpu" and measured["machine"]["torch_threads"] == 1
    assert [row["epoch"] for row in measured["train"]["device"]["epochs"]] == [1, 2]
    assert [row["epoch"] for row in measured["train"]["cpu"]["epochs"]] == [1]
    assert all(row["epoch_s"] > 0 and 0 < row["val_auc"] <= 1 for row in measured["train"]["device"]["epochs"])
    assert measured["encode"]["device"]["questions"] == 5000 and measured["encode"]["cpu"]["questions"] == 4096
    assert measured["encode"][f"device_chunks_{serving_gpu.WIDE_CHUNK}"]["chunk_size"] == serving_gpu.WIDE_CHUNK
    assert measured["encode"]["vs_cpu"]["max_abs_difference"] == 0.0  # both on the CPU here
    with pytest.raises(SystemExit, match="not measured on a CUDA device"):
        serving.gpu_row(out)
    on_cuda = tmp_path / "cuda.json"
    on_cuda.write_text(json.dumps(measured | {"machine": measured["machine"] | {"type": "cuda"}}))
    assert serving.gpu_row(on_cuda)["train"] == measured["train"]
