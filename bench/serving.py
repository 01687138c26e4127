"""Benchmark: scale where the user feels it (issue 40): the tokenizer, bursts of searches, and the
app serving 1M / 10M questions. Each step merges its keys into bench/results/serving.json.

    python -m bench.serving tokenize                         # tokenize_qps_per_core(_before)
    python -m bench.serving burst [--bundle B]               # 20 back-to-back clients, old path vs coalesced
    python -m bench.serving build --n 1000000 --out B1M      # a bundle over n questions (untrained weights)
    python -m bench.serving big --bundle B1M --key oneM      # startup, RSS, search p50/p99 through the app
    python -m bench.serving asymmetric --out A1M             # issue 58: a 1M student bundle and its asymmetric twin
    python -m bench.serving big --bundle A1M/asymmetric --key oneM_asymmetric   # (and A1M/student, oneM_student)
    python -m bench.serving gpu-merge FILE                   # bench.serving_gpu's file (a GPU machine's) as "gpu"

``tokenize``: every Quora-lite question from texts to padded id arrays, per CPU second of this
process (``time.process_time``, so the other jobs on a shared machine do not count), today's path
(``Vocabulary.encode`` text by text, then ``pad_batch`` over length-sorted chunks of 256, what
``encode_texts`` did) against ``Vocabulary.encode_batch`` + ``TokenBatch.padded`` on the same
chunks, each from a fresh vocabulary (cold: nothing hashed yet), then a second pass with the same
vocabulary (what the first pass hashed is kept, as over a large corpus), alternated over
``--repeats`` rounds; the median of the rounds. A full garbage collection runs before each pass,
untimed, so that no pass pays for the objects the one before left behind.

``burst``: ``bench.search_load`` runs 20 clients searching back to back (``--per-client`` searches
each) in the app (``QPR_BUNDLE``, or the demo corpus) started for each run: today's path (the
Search tab's endpoint through Gradio's API, ``QPR_COALESCE_SEARCHES=0``) and the app's HTTP API
with coalescing, ``--repeats`` runs each, alternated; the keys are the medians of the runs.

``build``: the corpus of ``bench.scale`` (Quora-lite + distractors up to ``--n``) encoded by
the product's default encoder shape (untrained, seed 0) into a new bundle with the ``auto`` index
and its BM25 index, under ``--work``. At 10M, encode first in two processes with
``python -m bench.scale encode --bundle B --n N --part k/2`` (B: a bundle this step built, the
same encoder): the build then reads those shards instead of encoding.

``big``: the app started on that bundle twice on one database and cache (the first start of a
deployment registers the corpus and fits the calibrations; a restart reuses both): seconds from
launch to the first search answered through Gradio's API for each, then the restarted server's
resident memory and p50/p99 of ``--searches`` searches one at a time, each through Gradio's API and
the app's HTTP search API (Quora-lite test questions).

``gpu-merge``: the file ``python -m bench.serving_gpu`` wrote on a lent GPU machine (training and
bulk encoding there, on CUDA and on its CPU: that module's doc) becomes the ``gpu`` row, and
``gpu_reason`` null, and its table replaces docs/SERVING.md's ``gpu`` section; a file measured
without CUDA (a dry run) is refused.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

import torch

from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from bench.scale import SHARD, Stacked, scale_corpus, shard_path, shards
from bench.search_load import GradioClient, HttpClient, run_search_load
from harness.app_process import start_app, stop_app
from qpr.bundles.bundle import Bundle
from qpr.bundles.general import STUDENT
from qpr.data.corpus import load_corpus
from qpr.data.corpus_file import corpus_path, read_corpus_file
from qpr.fsutil.atomic import atomic_path
from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_texts, pad_batch
from qpr.model.text import TextConfig, Vocabulary
from qpr.research.confidence import mean_ci
from qpr.retrieval.asymmetric import MEASURED, WeightChoice, unit
from qpr.retrieval.index import VectorIndex

RESULTS = ROOT / "bench" / "results" / "serving.json"
EMPTY = {"questions": 0, "startup_s": 0.0, "rss_gb": 0.0, "search_p50_ms": 0.0, "search_p99_ms": 0.0}
MINILM_DIM = 384  # the teacher's width, which an asymmetric bundle's student shares
NO_GPU = "not measured: this task was not drawn for a device machine (no GPU lent)"


def merge(update: dict, overwrite: bool = False) -> dict:
    """``update`` merged into the results file (created with the issue's keys), with machine and
    date; ``overwrite``: its keys' values replace the file's instead of being merged into them."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {
        "tokenize_qps_per_core": 0.0, "tokenize_qps_per_core_before": 0.0, "tenM": dict(EMPTY), "oneM": dict(EMPTY),
        "burst": {"clients": 20, "questions": 0, "searches_per_s": 0.0, "searches_per_s_before": 0.0, "p99_ms": 0.0},
        "gpu": None, "gpu_reason": NO_GPU, "machine": "", "date": ""}
    for key, value in update.items():
        merged = not overwrite and isinstance(results.get(key), dict) and isinstance(value, dict)
        results[key] = results[key] | value if merged else value
    results |= {"machine": f"2-core CPU machine: {machine()}", "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    write_json(results, RESULTS)
    return results


def quora_questions() -> list[str]:
    return load_corpus(Path(os.environ.get("QPR_DATA_DIR", ROOT.parent / "shared" / "data")) / "quora-lite")["question"].tolist()


def tokenize_rates(texts: list[str], repeats: int, chunk: int = 256, block: int = 65_536) -> dict:
    """Questions per CPU second, today's path and the batch tokenizer (module doc)."""
    tokens = Vocabulary.build(texts).tokens

    def today(vocab: Vocabulary) -> None:
        lists = [vocab.encode(text) for text in texts]
        order = np.argsort([len(ids) for ids in lists], kind="stable")
        for start in range(0, len(order), chunk):
            pad_batch([lists[i] for i in order[start : start + chunk]])

    def batched(vocab: Vocabulary) -> None:
        for first in range(0, len(texts), block):
            batch = vocab.encode_batch(texts[first : first + block])
            order = np.argsort(batch.lengths, kind="stable")
            for start in range(0, len(order), chunk):
                batch.padded(order[start : start + chunk])

    rates = {"before": [], "after": [], "before_second_pass": [], "after_second_pass": []}
    for _ in range(repeats):
        for name, run in (("before", today), ("after", batched)):
            vocab = Vocabulary(tokens, TextConfig())
            for key in (name, f"{name}_second_pass"):  # cold, then with what the first pass hashed
                gc.collect()  # the garbage of the path before (and of old vocabularies) is not this pass's
                start = time.process_time()
                run(vocab)
                rates[key].append(len(texts) / (time.process_time() - start))
    # Each round's own ratio: the medians' ratio is the bar's, these say how much it scatters.
    ratios = [after / before for after, before in zip(rates["after"], rates["before"])]
    return {"tokenize_qps_per_core": statistics.median(rates["after"]),
            "tokenize_qps_per_core_before": statistics.median(rates["before"]),
            "tokenize_second_pass_qps_per_core": statistics.median(rates["after_second_pass"]),
            "tokenize_second_pass_qps_per_core_before": statistics.median(rates["before_second_pass"]),
            "tokenize_rounds": {name: [round(r) for r in values] for name, values in rates.items()},
            "tokenize_round_ratios": ratios,
            "tokenize_round_ratio_mean_ci95": list(mean_ci(ratios)[1:]) if len(ratios) > 1 else None,
            "tokenize_measured": f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}, {repeats} alternated rounds, "
                                 f"1-min load {os.getloadavg()[0]:.1f}",
            "tokenize_questions": len(texts)}


def app_env(tmp: Path, bundle: Path | None, coalesce: bool = True) -> dict:
    env = {"QPR_CACHE_DIR": os.environ.get("QPR_CACHE_DIR", str(ROOT / "runs")), "QPR_DB_URL": f"sqlite:///{tmp / 'app.db'}",
           "QPR_COALESCE_SEARCHES": "1" if coalesce else "0", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return env | ({"QPR_BUNDLE": str(bundle)} if bundle else {})


def burst(bundle: Path | None, clients: int, per_client: int, repeats: int) -> dict:
    """Searches per second and p99 of ``clients`` back-to-back clients: today's path (the Search
    tab's endpoint through Gradio's API, each search alone) and the app's HTTP search API with
    coalescing (``ui.http_api``), ``repeats`` times each, alternated, each run in an app started
    for it; the keys hold the medians over the runs (the runs and a 95% interval of the mean
    beside them). Once, for reference: the Search tab's endpoint with coalescing."""
    configs = {"before": (False, "gradio"), "http": (True, "http"), "gradio_coalesced": (True, "gradio")}
    runs = {name: [] for name in configs}
    for repeat in range(repeats):
        for name, (coalesce, via) in configs.items():
            if name == "gradio_coalesced" and repeat:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                process, url, _ = start_app(app_env(Path(tmp), bundle, coalesce), Path(tmp) / "app.log", limit_s=900)
                try:
                    runs[name].append(run_search_load(url, clients, per_client, lone=5, pid=process.pid, via=via))
                finally:
                    stop_app(process)
            print(f"burst run {repeat + 1}/{repeats} {name}: {runs[name][-1]['searches_per_s']:.1f} searches/s, "
                  f"p99 {runs[name][-1]['search_p99_ms']:.1f} ms", flush=True)

    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[name])

    def spread(name: str, key: str) -> dict:
        values = [run[key] for run in runs[name]]
        _, low, high = mean_ci(values) if len(values) > 1 else (values[0],) * 3
        return {f"{key}_runs": values, f"{key}_mean_ci95": [low, high]}

    return {"clients": clients, "per_client": per_client, "repeats": repeats,
                "searches_per_s": median("http", "searches_per_s"), "searches_per_s_before": median("before", "searches_per_s"),
                "p99_ms": median("http", "search_p99_ms"), "p99_ms_before": median("before", "search_p99_ms"),
                "p50_ms": median("http", "search_p50_ms"), "p50_ms_before": median("before", "search_p50_ms"),
                "errors": sum(run["errors"] for name in ("http", "before") for run in runs[name]),
                "server_cpu_ms_per_search": median("http", "server_cpu_ms_per_search"),
                "server_cpu_ms_per_search_before": median("before", "server_cpu_ms_per_search"),
                "path": "GET /api/search (ui.http_api), concurrent searches coalesced",
                "path_before": "the Search tab's endpoint through Gradio's API, each search alone (QPR_COALESCE_SEARCHES=0)",
                "http_runs": spread("http", "searches_per_s") | spread("http", "search_p99_ms"),
                "before_runs": spread("before", "searches_per_s") | spread("before", "search_p99_ms"),
                "gradio_coalesced": {key: runs["gradio_coalesced"][0][key] for key in
                                     ("searches_per_s", "search_p50_ms", "search_p99_ms", "server_cpu_ms_per_search", "errors")},
                "load_average": os.getloadavg()[0]}


def scale_table(n: int, work: Path) -> tuple[pd.DataFrame, Vocabulary]:
    """Quora-lite + distractors up to ``n`` questions (``bench.scale``'s corpus, kept under
    ``work``) and the vocabulary of Quora-lite's training questions."""
    base = load_corpus(Path(os.environ.get("QPR_DATA_DIR", ROOT.parent / "shared" / "data")) / "quora-lite")
    table_path = work / f"corpus-{n}.parquet"
    if not table_path.exists():
        with atomic_path(table_path) as tmp:
            (base if n <= len(base) else scale_corpus(base, n)).to_parquet(tmp, index=False)
    return pd.read_parquet(table_path), Vocabulary.build(base.loc[base["split"] == "train", "question"], TextConfig())


def build(n: int, out: Path, work: Path) -> Path:
    """A bundle over Quora-lite + distractors up to ``n`` questions (``bench.scale``'s corpus) with
    the product's default encoder shape, weights untrained (seed 0): what a search costs depends on
    the shapes (300-d vectors, the index ``auto`` picks for ``n``), not the weights' values; no
    quality is measured from it (docs/SCALE.md has quality at these sizes)."""
    corpus, vocab = scale_table(n, work)
    torch.manual_seed(0)
    encoder = QuestionEncoder(vocab.size, EncoderConfig())
    vectors = encoded_shards(work, n, encoder, vocab, corpus)
    start = time.perf_counter()
    bundle = Bundle.create(encoder, vocab, corpus, train_info={"weights": "untrained, seed 0 (bench.serving build)"},
                           vectors=vectors)
    print(f"built {len(corpus):,} questions in {time.perf_counter() - start:.0f} s: {bundle.index.describe()}", flush=True)
    return bundle.save(out)


def build_asymmetric(n: int, out: Path, work: Path) -> dict:
    """Issue 58's costs at ``n`` questions: the general CNN's shape (``STUDENT``, MiniLM's 384
    dimensions; untrained, seed 0) encodes ``bench.scale``'s corpus into a symmetric bundle
    (``out``/student) and its asymmetric twin (``out``/asymmetric: ``Bundle.with_teacher``, what
    ``qpr rebase --asymmetric`` builds, at the weight ``MEASURED``). The teacher's vectors are random
    unit vectors (seed 0): an index's size, build and search cost depend on the shapes, not the
    values, and MiniLM's own encoding of the corpus is a one-time cost measured apart (its rate in
    docs/OUT_OF_DOMAIN.md). Returns the build's seconds and sizes."""
    corpus, vocab = scale_table(n, work)
    torch.manual_seed(0)
    encoder = QuestionEncoder(vocab.size, replace(STUDENT, output_dim=MINILM_DIM, normalize=True))
    start = time.perf_counter()
    student = encode_texts(encoder, vocab, corpus["question"].tolist())
    encode_s = time.perf_counter() - start
    start = time.perf_counter()
    bundle = Bundle.create(encoder, vocab, corpus, train_info={"weights": "untrained, seed 0 (bench.serving asymmetric)"},
                           vectors=student)
    create_s = time.perf_counter() - start
    start = time.perf_counter()
    VectorIndex.build(student, corpus["qid"].to_numpy(), bundle.index.config)
    symmetric_s = time.perf_counter() - start
    teacher = unit(np.random.default_rng(0).standard_normal((len(corpus), MINILM_DIM)).astype(np.float32))
    start = time.perf_counter()
    asymmetric = bundle.with_teacher(teacher, WeightChoice(MEASURED, {}, 0), student=student)
    asymmetric_s = time.perf_counter() - start
    folders = {"student": bundle.save(out / "student"), "asymmetric": asymmetric.save(out / "asymmetric")}
    size = {name: sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e9 for name, folder in folders.items()}
    return {"questions": len(corpus), "dimensions": MINILM_DIM, "encode_s": encode_s, "create_s": create_s,
            "index_build_s": {"student": symmetric_s, "asymmetric": asymmetric_s},
            "index": {"student": bundle.index.describe(), "asymmetric": asymmetric.index.describe()},
            "bundle_gb": size, "teacher": "random unit vectors, seed 0 (costs depend on shapes, not values)",
            # Linux gives ru_maxrss in KiB: the build's own peak, both bundles and the vectors held at once.
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
            "machine": machine(), "date": datetime.now(timezone.utc).isoformat(timespec="minutes")}


ASYMMETRIC_KEYS = ("oneM_asymmetric_build", "oneM_student", "oneM_asymmetric")


def asymmetric_table(results: dict) -> str:
    """docs/SERVING.md's ``asym1m`` section: the 1M student bundle beside its asymmetric twin
    (``build_asymmetric``, then ``big`` on each), from the results' ``ASYMMETRIC_KEYS``."""
    built, served = results["oneM_asymmetric_build"], {name: results[f"oneM_{name}"] for name in ("student", "asymmetric")}
    rows = [{"bundle": name, "index": built["index"][name], "index_build_s": built["index_build_s"][name],
             "bundle_gb": built["bundle_gb"][name], "startup_s": row["startup_s"], "first_start_s": row["first_start_s"],
             "rss_gb": row["rss_gb"], "private_rss_gb": row["private_rss_gb"],
             "p50_p99": f"{row['search_p50_ms']:.1f} / {row['search_p99_ms']:.1f}",
             "http_p50_p99": f"{row['http_search_p50_ms']:.1f} / {row['http_search_p99_ms']:.1f}", "load": row["load_average"]}
            for name, row in served.items()]
    table = markdown_table(rows, [("bundle", "bundle"), ("index", "index"), ("index_build_s", "index build (s)"),
                                  ("bundle_gb", "on disk (GB)"), ("startup_s", "restart (s)"), ("first_start_s", "first start (s)"),
                                  ("rss_gb", "RSS (GB)"), ("private_rss_gb", "private (GB)"), ("p50_p99", "Gradio p50 / p99 (ms)"),
                                  ("http_p50_p99", "HTTP p50 / p99 (ms)"), ("load", "1-min load")])
    return (f"Measured {built['date']} on {built['machine']}: {built['questions']:,} questions (Quora-lite + distractors), "
            f"the general CNN's shape ({built['dimensions']}-d, untrained, seed 0; encoding the corpus took "
            f"{built['encode_s']:.0f} s on one thread), the teacher's vectors {built['teacher']}; "
            + (f"the build's peak resident memory {built['peak_rss_gb']:.1f} GB; " if "peak_rss_gb" in built else "")
            + f"{served['student']['searches']} searches one at a time, one run each.\n\n{table}")


def encoded_shards(work: Path, n: int, encoder: QuestionEncoder, vocab: Vocabulary, corpus: pd.DataFrame):
    """The corpus' vectors from ``bench.scale encode``'s shards under ``work`` (memory-mapped; K
    processes encode them in parallel and resumably), if they are all there and hold this
    encoder's vectors of this corpus (the first questions checked); None: encode in the build."""
    if not all(shard_path(work, i).exists() for i in range(-(-n // SHARD))):
        return None
    maps = shards(work, n)
    head = min(256, n)
    if not np.allclose(maps[0][:head], encode_texts(encoder, vocab, corpus["question"].head(head).tolist()), atol=1e-5):
        raise SystemExit(f"the shards under {work}/vectors are not this encoder's vectors of this corpus: remove them")
    print(f"using the {n:,} vectors encoded in {work}/vectors", flush=True)
    return Stacked(maps)


def rss_gb(pid: int) -> tuple[float, float, float, float]:
    """Resident, peak resident, private (anonymous) and file-backed resident memory of process
    ``pid``, in GB (10^9 bytes). The file-backed part is memory-mapped bundle files (index, BM25)
    in the page cache: shared, and given back under memory pressure."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return tuple(int(fields[name].split()[0]) * 1024 / 1e9 for name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"))


def big(bundle: Path, searches: int) -> dict:
    """The app on ``bundle``, started twice on one database and cache: the first start (a new
    deployment: the corpus registered in the annotation database, the calibrations fitted) and a
    restart (every later start), each timed from launch to the first search answered through
    Gradio's API; then, in the restarted app, resident memory and p50/p99 of searches one at a
    time through Gradio's API and through the app's HTTP search API (Quora-lite test questions,
    each through both, in alternating order)."""
    corpus = read_corpus_file(corpus_path(bundle), "rebuild the bundle")
    queries = corpus.loc[corpus["split"] == "test", "question"].head(searches + 1).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        env = app_env(Path(tmp), bundle) | {"QPR_CACHE_DIR": str(Path(tmp) / "cache")}
        starts = []
        for run in ("first", "restart"):
            launched = time.perf_counter()
            process, url, _ = start_app(env, Path(tmp) / f"app-{run}.log", limit_s=3600)
            try:
                clients = {"gradio": GradioClient(url), "http": HttpClient(url)}
                clients["gradio"].search(queries[0])
                starts.append(time.perf_counter() - launched)
                if run == "first":
                    continue
                # Each query through both APIs, which one first alternating: the index is memory-mapped,
                # and the first search of a query may read its pages from disk for the second.
                times = {via: [] for via in clients}
                for i, query in enumerate(queries[1:]):
                    for via in sorted(clients, reverse=i % 2 == 1):
                        start = time.perf_counter()
                        clients[via].search(query)
                        times[via].append((time.perf_counter() - start) * 1000)
                resident, peak, private, mapped = rss_gb(process.pid)
            finally:
                stop_app(process)
    return {"questions": len(corpus), "startup_s": starts[1], "first_start_s": starts[0], "rss_gb": resident,
            "peak_rss_gb": peak, "private_rss_gb": private, "file_rss_gb": mapped, "search_p50_ms": float(np.percentile(times["gradio"], 50)),
            "search_p99_ms": float(np.percentile(times["gradio"], 99)),
            "http_search_p50_ms": float(np.percentile(times["http"], 50)),
            "http_search_p99_ms": float(np.percentile(times["http"], 99)),
            "searches": len(queries) - 1, "load_average": os.getloadavg()[0], "measured": True,
            "startup": "a restart on the same database and cache (first_start_s: the first start of a new deployment)"}


def gpu_row(path: Path) -> dict:
    """The ``gpu`` row from ``bench.serving_gpu``'s file ``path``; SystemExit if it was not measured on CUDA."""
    measured = json.loads(path.read_text())
    if measured.get("machine", {}).get("type") != "cuda":
        raise SystemExit(f"{path} was not measured on a CUDA device (a --device cpu dry run?): nothing merged")
    return measured


def gpu_table(gpu: dict) -> str:
    """docs/SERVING.md's table of the ``gpu`` row: each training epoch and each encoding, on CUDA
    and on the same machine's CPU (a phase that failed or was cut short shows as such)."""
    spec = gpu["machine"]
    rows = []
    for where, label in (("device", f"CUDA ({spec['name']})"), ("cpu", f"CPU ({spec['torch_threads']} torch threads)")):
        train = gpu["train"].get(where, {})
        note = " (cut short)" if train.get("partial") else ""
        rows += [{"what": f"training epoch {row['epoch']}, {label}{note}", "seconds": row["epoch_s"], "rate": row["steps_per_s"],
                  "unit": "steps/s", "val_auc": row["val_auc"], "validation_s": row["validation_s"]} for row in train.get("epochs", [])]
        if "in_progress" in train:
            rows.append({"what": f"training epoch {train['in_progress']['epoch']}, {label}, cut short at step "
                                 f"{train['in_progress']['steps_done']} of {train['in_progress']['steps']}",
                         "rate": train["in_progress"]["steps_per_s"], "unit": "steps/s"})
    for key, value in gpu["encode"].items():
        if "questions_per_s" in value:
            where = f"CUDA ({spec['name']})" if key.startswith("device") else f"CPU ({spec['torch_threads']} torch threads)"
            rows.append({"what": f"encode_texts of {value['questions']:,} questions, chunks of {value['chunk_size']}, {where}",
                         "seconds": value["seconds"], "rate": value["questions_per_s"], "unit": "questions/s"})
    table = markdown_table(rows, [("what", "what"), ("seconds", "seconds"), ("rate", "rate"), ("unit", "unit"),
                                  ("val_auc", "val ROC AUC"), ("validation_s", "of which validation s")])
    errors = "".join(f"\n- {phase} failed: {error}" for phase, error in gpu.get("errors", {}).items())
    difference = gpu["encode"].get("vs_cpu", {}).get("max_abs_difference")
    return (f"Measured {gpu['measured']} on {spec['name']} ({spec['memory_gb']:.0f} GB, CUDA {spec['cuda']}), torch {spec['torch']}, "
            f"Python {spec['python']}, CPU {spec['cpu']} ({spec['usable_cpus']} usable of {spec['cpu_count']}); "
            f"{gpu['corpus']['source']}: {gpu['corpus']['questions']:,} questions ({gpu['corpus']['train_questions']:,} train), "
            f"{gpu['train_config']}; one run. Largest difference between CUDA's and the CPU's vectors: {difference}.{errors}\n\n{table}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("tokenize")
    p.add_argument("--repeats", type=int, default=3)
    p = sub.add_parser("burst")
    p.add_argument("--bundle", type=Path, help="default: the demo corpus")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--per-client", type=int, default=50)
    p.add_argument("--repeats", type=int, default=5)
    p = sub.add_parser("build")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=ROOT.parent / "scale-work")
    p = sub.add_parser("asymmetric")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--out", type=Path, required=True, help="a folder: the symmetric and asymmetric bundles go in it")
    p.add_argument("--work", type=Path, default=ROOT.parent / "scale-work")
    p = sub.add_parser("big")
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--key", choices=["oneM", "tenM", "oneM_student", "oneM_asymmetric"], required=True)
    p.add_argument("--searches", type=int, default=300)
    p = sub.add_parser("gpu-merge")
    p.add_argument("file", type=Path, help="the JSON file python -m bench.serving_gpu wrote")
    args = parser.parse_args()
    if args.step == "tokenize":
        print(merge(tokenize_rates(quora_questions(), args.repeats)))
    elif args.step == "burst":
        measured = burst(args.bundle, args.clients, args.per_client, args.repeats)
        key = "burst" if args.bundle else "burst_demo"
        size = len(read_corpus_file(corpus_path(args.bundle), "rebuild the bundle")) if args.bundle else None
        print(merge({key: measured | ({"questions": size} if size else {"corpus": "demo"})}, overwrite=True))
    elif args.step == "build":
        build(args.n, args.out, args.work)
    elif args.step == "asymmetric":
        print(merge({"oneM_asymmetric_build": build_asymmetric(args.n, args.out, args.work)}, overwrite=True))
    elif args.step == "gpu-merge":
        gpu = merge({"gpu": gpu_row(args.file), "gpu_reason": None}, overwrite=True)["gpu"]
        replace_marked_section(ROOT / "docs" / "SERVING.md", "gpu", gpu_table(gpu))
        print(gpu_table(gpu))
    else:
        results = merge({args.key: big(args.bundle, args.searches)}, overwrite=True)
        print(results[args.key])
        if all(key in results for key in ASYMMETRIC_KEYS):
            replace_marked_section(ROOT / "docs" / "SERVING.md", "asym1m", asymmetric_table(results))


if __name__ == "__main__":
    main()
