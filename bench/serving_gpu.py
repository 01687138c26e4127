"""Benchmark: training and bulk encoding on a GPU against the same machine's CPU (issue 40: the
``gpu`` row of bench/results/serving.json), run once on a lent device machine.

    python -m bench.serving_gpu --out gpu.json [--corpus C] [--epochs 2] [--cpu-epochs 1] \\
        [--encode 1000000] [--cpu-encode 250000]        # on the GPU machine
    python -m bench.serving gpu-merge gpu.json         # back here: the file into serving.json's "gpu"

A module of its own because ``bench.serving`` imports the app's clients (Gradio's, the load
tools), which a bare GPU machine lacks; this one needs only qpr's training and encoding, the path
of ``qpr train --device`` and of a bundle's indexing (``qpr.model.device.use_device``, then
``qpr.training.train.train`` and ``qpr.model.encoder.encode_texts``).

Training: the product's default CNN + SDML (``TrainConfig()`` and ``EncoderConfig()``, seed 0, but
``--epochs`` epochs with no early stop) on ``--corpus`` (default: Quora-lite from QPR_DATA_DIR; a
cluster file such as a Parquet copy of it does as well), on the device and then on the CPU. Per
epoch: its seconds (drawing the epoch's pairs, the steps, the validation ROC AUC: the history's
``seconds``), steps per second over the epoch's batches after its first (each step ends in
``loss.item()``, so the GPU has finished it when the time is taken), the validation's seconds and
the val ROC AUC (bfloat16 autocast on CUDA, float32 on the CPU: the two should agree closely).
The first device epoch pays CUDA's start (kernels loaded, the allocator's first blocks).

Encoding: ``encode_texts`` of the corpus' questions repeated up to ``--encode`` (device) and
``--cpu-encode`` (CPU) questions, by the encoder the device training gave (the speed depends on
the shapes, not the weights): questions per second, each after a warm-up call of ``BULK``
questions on that device. Repeating the questions means the tokenizer's piece table holds every
piece after the first pass, as over a large corpus of one domain. Once more on the device with
chunks of 2048 instead of the default 256 (what the chunk size costs there). The largest
difference between the device's and the CPU's vectors of the first ``BULK`` questions checks that
both encode alike.

Keys: ``train`` and ``encode`` hold ``device`` (CUDA) and ``cpu`` (the same machine's CPU, torch
using the CPUs this process may use). The output file is rewritten after each phase and every
``PROGRESS_EVERY`` training steps (``partial``: true), so a run cut short keeps what it measured;
a phase that fails is recorded under ``errors`` (its traceback in the log) and the others still
run (encoding then uses an untrained encoder of the default shape).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from bench.common import write_json
from qpr.data.corpus import data_dir, fingerprint, load_corpus
from qpr.model.device import BULK, use_device
from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_texts
from qpr.model.text import Vocabulary
from qpr.training.train import TrainConfig, train

WIDE_CHUNK = 2048  # the device's second encoding: chunks this long instead of encode_texts' default
PROGRESS_EVERY = 25  # steps between the partial figures written during an epoch


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup v2 quota (a container's
    "16 cores" may be a quota on a larger host, where torch's default would start a thread per
    host core)."""
    cpus = len(os.sched_getaffinity(0))
    quota = Path("/sys/fs/cgroup/cpu.max")
    if quota.exists():
        limit, period = quota.read_text().split()[:2]
        if limit != "max":
            cpus = min(cpus, max(1, int(limit) // int(period)))
    return cpus


def describe(device: torch.device) -> dict:
    """The machine: the device's name and memory, torch and CUDA versions, the CPU and its threads."""
    gpu = {}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = {"name": props.name, "memory_gb": props.total_memory / 1e9, "capability": f"{props.major}.{props.minor}",
               "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    models = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")]
    return {"type": device.type, **gpu, "torch": torch.__version__, "python": platform.python_version(),
            "cpu": models[0] if models else platform.machine(), "cpu_count": os.cpu_count(), "usable_cpus": usable_cpus(),
            "torch_threads": torch.get_num_threads(), "platform": platform.platform()}


def timed_training(corpus, device: str, epochs: int, partial: Callable[[dict], None]) -> dict:
    """The default training on ``device`` for ``epochs`` epochs: its figures per epoch (module doc),
    the trained encoder and vocabulary under ``"result"``. ``partial`` gets the figures so far
    every ``PROGRESS_EVERY`` steps, so that a run cut short mid-epoch still has a step rate."""
    use_device(device)
    marks: dict[int, list[float]] = {}  # epoch -> [first step done, last step done, row written]
    steps: dict[int, int] = {}
    rows: list[dict] = []

    def on_batch(epoch: int, done: int, total: int) -> None:
        if done in (1, total):
            marks.setdefault(epoch, []).append(time.perf_counter())
        steps[epoch] = total
        if done > 1 and done % PROGRESS_EVERY == 0:
            so_far = {"epoch": epoch, "steps_done": done, "steps": total,
                      "steps_per_s": (done - 1) / (time.perf_counter() - marks[epoch][0])}
            partial({"epochs": rows, "in_progress": so_far})

    def on_epoch(row: dict) -> None:
        marks[row["epoch"]].append(time.perf_counter())
        first, last, written = marks[row["epoch"]][0], marks[row["epoch"]][-2], marks[row["epoch"]][-1]
        before = rows[-1]["seconds_since_start"] if rows else 0.0
        rows.append({"epoch": row["epoch"], "epoch_s": row["seconds"] - before, "seconds_since_start": row["seconds"],
                     "steps": steps[row["epoch"]],
                     "steps_per_s": (steps[row["epoch"]] - 1) / (last - first) if last > first else None,
                     "validation_s": written - last, "val_auc": row["val_auc"], "loss": row["loss"]})
        partial({"epochs": rows})
        print(f"{device} epoch {row['epoch']}: {rows[-1]['epoch_s']:.1f} s, {rows[-1]['steps_per_s']:.2f} steps/s, "
              f"val AUC {row['val_auc']:.4f}", flush=True)

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    result = train(corpus, TrainConfig(max_epochs=epochs, patience=epochs), progress=False, on_batch=on_batch, on_epoch=on_epoch)
    peak = torch.cuda.max_memory_allocated() / 1e9 if device == "cuda" else None
    return {"epochs": rows, "train_call_s": time.perf_counter() - started, "gpu_peak_memory_gb": peak, "result": result}


def encode_rate(encoder: QuestionEncoder, vocab: Vocabulary, texts: list[str], device: str, chunk_size: int = 256) -> dict:
    """Questions per second of ``encode_texts`` over ``texts`` on ``device`` after a warm-up."""
    use_device(device)
    encode_texts(encoder, vocab, texts[:BULK], chunk_size=chunk_size)
    started = time.perf_counter()
    encode_texts(encoder, vocab, texts, chunk_size=chunk_size)
    seconds = time.perf_counter() - started
    print(f"{device} encode (chunks of {chunk_size}): {len(texts) / seconds:,.0f} questions/s over {len(texts):,}", flush=True)
    return {"questions": len(texts), "seconds": seconds, "questions_per_s": len(texts) / seconds, "chunk_size": chunk_size}


def max_difference(encoder: QuestionEncoder, vocab: Vocabulary, texts: list[str], device: str) -> float:
    """The largest difference between the vectors of ``texts`` encoded on ``device`` and on the CPU."""
    use_device(device)
    on_device = encode_texts(encoder, vocab, texts)
    use_device("cpu")
    return float(np.abs(on_device - encode_texts(encoder, vocab, texts)).max())


def repeated(questions: list[str], n: int) -> list[str]:
    return (questions * (n // len(questions) + 1))[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write (rewritten after each phase)")
    parser.add_argument("--corpus", type=Path, help="default: Quora-lite under QPR_DATA_DIR")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="the device measured against the CPU "
                        "(cpu: a dry run of the whole script on a machine without a GPU)")
    parser.add_argument("--epochs", type=int, default=2, help="training epochs on the device")
    parser.add_argument("--cpu-epochs", type=int, default=1, help="training epochs on the CPU (0: none)")
    parser.add_argument("--encode", type=int, default=1_000_000, help="questions encoded on the device")
    parser.add_argument("--cpu-encode", type=int, default=250_000, help="questions encoded on the CPU")
    parser.add_argument("--cpu-threads", type=int, help="torch's CPU threads (default: the CPUs this process may use)")
    args = parser.parse_args()
    torch.set_num_threads(args.cpu_threads or usable_cpus())
    corpus_source = args.corpus or data_dir() / "quora-lite"
    corpus = load_corpus(corpus_source)
    device = use_device(args.device)
    result = {"measured": now(), "machine": describe(device), "corpus": {"source": corpus_source.name, "questions": len(corpus),
              "fingerprint": fingerprint(corpus), "train_questions": int((corpus["split"] == "train").sum())},
              "train_config": "TrainConfig() and EncoderConfig() defaults (CNN windows 1/3/5, SDML, batch 512), seed 0, no early stop",
              "train": {}, "encode": {}, "errors": {}}
    print(f"{result['machine']}\n{result['corpus']}", flush=True)

    def phase(group: str, key: str, measure: Callable[[Callable[[dict], None]], dict]) -> dict | None:
        """``measure(partial)`` stored as ``result[group][key]`` and the file rewritten; a failure is
        recorded under ``errors`` (its traceback in the log) and the run goes on to the next phase.
        ``measure`` gets the function that stores partial figures (training's, mid-epoch)."""
        def partial(figures: dict) -> None:
            result[group][key] = figures | {"partial": True}
            write_json(result, args.out)
        try:
            value = measure(partial)
        except Exception as error:  # noqa: BLE001 - one shot on a lent machine: keep every other phase's figures
            traceback.print_exc()
            result["errors"][f"{group}.{key}"] = f"{type(error).__name__}: {error}"
            value = None
        else:
            result[group][key] = {k: v for k, v in value.items() if k != "result"}
        write_json(result, args.out)
        return value

    trained = phase("train", "device", lambda partial: timed_training(corpus, args.device, args.epochs, partial))
    if trained:
        encoder, vocab = trained["result"].encoder, trained["result"].vocab
    else:  # the speed of encoding depends on the shapes, not the weights
        torch.manual_seed(0)
        vocab = Vocabulary.build(corpus.loc[corpus["split"] == "train", "question"])
        encoder = QuestionEncoder(vocab.size, EncoderConfig())
    texts = repeated(corpus["question"].tolist(), max(args.encode, args.cpu_encode, BULK))
    phase("encode", "device", lambda _: encode_rate(encoder, vocab, texts[: args.encode], args.device))
    phase("encode", f"device_chunks_{WIDE_CHUNK}", lambda _: encode_rate(encoder, vocab, texts[: args.encode], args.device, WIDE_CHUNK))
    phase("encode", "cpu", lambda _: encode_rate(encoder, vocab, texts[: args.cpu_encode], "cpu"))
    phase("encode", "vs_cpu", lambda _: {"max_abs_difference": max_difference(encoder, vocab, texts[:BULK], args.device)})
    if args.cpu_epochs:
        phase("train", "cpu", lambda partial: timed_training(corpus, "cpu", args.cpu_epochs, partial))
    result["finished"] = now()
    write_json(result, args.out)
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
