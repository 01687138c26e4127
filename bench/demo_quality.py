"""Quality on the app's demo corpus: the demo bundle trained as the app trains it, at several seeds.

    python -m bench.demo_quality [--seeds 0 1 2]

Trains the tutorial's settings (``workflows.project.SMALL_CORPUS``, its training seed varied) on
``workflows/demo_corpus.tsv`` and reports H@1, H@10 and MRR on its val and test queries, dense and hybrid
(as served), each seed's and their mean with a 95% t-interval. The fastest quality check there
is (about 15 s a seed on one thread): re-run it after a change that should not move quality.
Seed 0 is the bundle the app serves.

Writes ``bench/results/demo_quality.json`` (atomically) and the demo section of docs/QUALITY.md.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from datetime import datetime, timezone

import torch

from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from qpr.bundles.training import train_bundle
from qpr.data.corpus import read_cluster_file
from qpr.research.confidence import mean_ci
from workflows.demos import DEMO_CORPUS
from workflows.project import SMALL_CORPUS

RESULTS = ROOT / "bench" / "results" / "demo_quality.json"
DOC = ROOT / "docs" / "QUALITY.md"
SYSTEMS = {"dense": "metrics", "hybrid": "hybrid_metrics"}


def measure(seeds: list[int]) -> dict:
    corpus = read_cluster_file(DEMO_CORPUS)
    runs = []
    for seed in seeds:
        start = time.perf_counter()
        bundle = train_bundle(corpus, replace(SMALL_CORPUS.train, seed=seed), SMALL_CORPUS.text, SMALL_CORPUS.encoder, data=str(DEMO_CORPUS), progress=False)
        seconds = time.perf_counter() - start
        for system, key in SYSTEMS.items():
            for split, metrics in (getattr(bundle.manifest, key) or {}).items():
                runs.append({"seed": seed, "system": system, "split": split, "H1": metrics["H1"], "H10": metrics["H10"],
                             "MRR": metrics["MRR"], "queries": metrics["queries"], "train_s": round(seconds, 1)})
        print(f"seed {seed}: trained in {seconds:.1f} s", flush=True)
    means = []
    for system in SYSTEMS:
        for split in ("val", "test"):
            rows = [r for r in runs if r["system"] == system and r["split"] == split]
            if not rows:
                continue
            h1 = [r["H1"] for r in rows]
            mean, low, high = mean_ci(h1) if len(h1) > 1 else (h1[0], None, None)
            means.append({"system": system, "split": split, "seeds": len(rows), "H1_mean": mean, "H1_ci95": [low, high],
                          "MRR_mean": sum(r["MRR"] for r in rows) / len(rows)})
    return {"corpus": {"file": str(DEMO_CORPUS.relative_to(ROOT)), "questions": len(corpus),
                       "clusters": int(corpus["cluster"].nunique())},
            "seeds": seeds, "runs": runs, "means": means, "machine": machine(), "torch_threads": torch.get_num_threads(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def render(result: dict) -> str:
    rows = [m | {"ci": f"[{m['H1_ci95'][0]:.3f}, {m['H1_ci95'][1]:.3f}]" if m["seeds"] > 1 else "one seed"} for m in result["means"]]
    table = markdown_table(rows, [("system", "system"), ("split", "split"), ("seeds", "seeds"), ("H1_mean", "H@1 mean"),
                                  ("ci", "95% t-interval"), ("MRR_mean", "MRR mean")])
    corpus = result["corpus"]
    return (f"Measured by `python -m bench.demo_quality` on {result['date'][:10]}: the demo bundle as the app trains it, "
            f"{corpus['questions']} questions in {corpus['clusters']} clusters ({corpus['file']}), seeds "
            f"{', '.join(map(str, result['seeds']))}; {result['machine']}.\n\n{table}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (0 is the served demo)")
    args = parser.parse_args(argv)
    result = measure(args.seeds)
    write_json(result, RESULTS)
    replace_marked_section(DOC, "demo-quality", render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
