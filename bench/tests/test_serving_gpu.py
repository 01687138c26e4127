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
    gpu = {"type": "cuda", "name": "Some GPU", "memory_gb": 80.0, "cuda": "13.0"}
    on_cuda.write_text(json.dumps(measured | {"machine": measured["machine"] | gpu}))
    row = serving.gpu_row(on_cuda)
    assert row["train"] == measured["train"]
    table = serving.gpu_table(row)
    assert "training epoch 2, CUDA (Some GPU)" in table and "training epoch 1, CPU (1 torch threads)" in table
    assert "encode_texts of 5,000 questions, chunks of 2048, CUDA (Some GPU)" in table
    assert "encode_texts of 4,096 questions, chunks of 256, CPU" in table


def test_the_table_says_what_failed_and_where_a_run_was_cut_short():
    cut = {"measured": "2026-11-28T07:00:00+00:00", "train_config": "defaults", "errors": {"encode.cpu": "RuntimeError: boom"},
           "machine": {"type": "cuda", "name": "G", "memory_gb": 80.0, "cuda": "13.0", "torch": "2.11", "python": "3.12",
                       "cpu": "x", "usable_cpus": 16, "cpu_count": 16, "torch_threads": 16},
           "corpus": {"source": "quora-lite.parquet", "questions": 10, "train_questions": 8},
           "train": {"device": {"epochs": [], "in_progress": {"epoch": 1, "steps_done": 50, "steps": 200, "steps_per_s": 9.5},
                                "partial": True}},
           "encode": {}}
    table = serving.gpu_table(cut)
    assert "encode.cpu failed: RuntimeError: boom" in table
    assert "training epoch 1, CUDA (G), cut short at step 50 of 200" in table
