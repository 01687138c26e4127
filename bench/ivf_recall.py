"""Why an inverted file keeps so little of the exact top 20 on SDML vectors, and what fixes it.

On a trained bundle's corpus (Quora-lite: 157k questions) this measures, for the test queries:
the spread of the vectors' norms and how much of each vector is the corpus mean; hubness (the
skew of the k-occurrence N_20: how often each question is in someone's exact top 20, from a
sample of queries); how unevenly k-means fills the inverted lists (FAISS's imbalance factor); how
many lists a query's exact top 20 spread over, and how many probes (lists nearest the query)
it takes to reach them; and how close the 20th neighbour is compared with a random question
(relative contrast). Then recall@20 against the exact search *of the same vectors* and test H@1
of ``IVF{nlist},Flat`` for the raw vectors and for the vectors with the corpus mean removed and
scaled to unit length (an index-side transform: queries get the same).

``--encoders`` asks the encoder side instead: the same figures for the raw vectors of bundles
trained on the same corpus with other encoder settings (e.g. less label smoothing, or unit
vectors with the cosine SDML), to see whether training for more contrast lets fewer probes reach
the exact top 20. Each step keeps the other's results in the results file.

    python -m bench.ivf_recall --bundle B [--nlist 1024]        # bench/results/ivf_recall.json
    python -m bench.ivf_recall --encoders B B_cosine B_smooth   # its "encoders" entry
"""

from __future__ import annotations

import argparse
import json
import time

import faiss
import numpy as np
import pandas as pd
from scipy.stats import skew

from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from bench.scale import hits
from qpr.bundles.bundle import Bundle
from qpr.evaluation.metrics import TOP, query_set, rank_metrics
from qpr.retrieval.index import KMEANS_ITERATIONS, TRAIN_PER_LIST

PROBES = (1, 10, 32, 100)
HUB_SAMPLE = 5_000  # queries whose exact top 20 estimate each question's k-occurrence
RESULTS = ROOT / "bench" / "results" / "ivf_recall.json"


def unit_centred(vectors: np.ndarray, mean: np.ndarray) -> np.ndarray:
    centred = vectors - mean
    return centred / np.linalg.norm(centred, axis=1, keepdims=True)


def shape_of(vectors: np.ndarray, queries: np.ndarray, exact_ids: np.ndarray, rng) -> dict:
    """Norms, share of the mean, hubness and relative contrast of ``vectors`` (rows = corpus order)."""
    norms = np.linalg.norm(vectors, axis=1)
    mean = vectors.mean(axis=0)
    sample = vectors[rng.choice(len(vectors), min(HUB_SAMPLE, len(vectors)), replace=False)]
    _, neighbours = faiss.knn(sample, vectors, TOP + 1)
    occurrence = np.bincount(neighbours[:, 1:].ravel(), minlength=len(vectors))
    d_exact = ((queries[:, None, :] - vectors[exact_ids[:, 1:TOP + 1]]) ** 2).sum(-1)
    random_rows = vectors[rng.integers(0, len(vectors), len(queries))]
    d_random = ((queries - random_rows) ** 2).sum(-1)
    return {
        "norm_mean": float(norms.mean()), "norm_cv": float(norms.std() / norms.mean()),
        "norm_p1": float(np.percentile(norms, 1)), "norm_p99": float(np.percentile(norms, 99)),
        "mean_vector_share": float(np.linalg.norm(mean) ** 2 / (norms ** 2).mean()),
        "k_occurrence_skew": float(skew(occurrence)), "k_occurrence_max": int(occurrence.max()),
        "share_never_a_neighbour": float((occurrence == 0).mean()),
        "contrast_random_over_20th": float(np.median(d_random / d_exact[:, -1])),
        "contrast_20th_over_1st": float(np.median(d_exact[:, -1] / np.maximum(d_exact[:, 0], 1e-12))),
    }


def ivf_behaviour(vectors: np.ndarray, queries: np.ndarray, exact_ids: np.ndarray, nlist: int,
                  corpus, own: np.ndarray, qids: np.ndarray) -> dict:
    """List imbalance, spread of the exact top 20 over lists, and recall / H@1 per probe count."""
    quantizer = faiss.IndexFlatL2(vectors.shape[1])
    index = faiss.IndexIVFFlat(quantizer, vectors.shape[1], nlist)
    index.cp.niter = KMEANS_ITERATIONS  # trained as qpr.retrieval.index trains its inverted files
    sample = np.random.default_rng(0).choice(len(vectors), min(len(vectors), nlist * TRAIN_PER_LIST), replace=False)
    start = time.perf_counter()
    index.train(vectors[np.sort(sample)])
    index.add_with_ids(vectors, qids)
    build = time.perf_counter() - start
    _, assign = quantizer.search(vectors, 1)
    list_of = assign[:, 0]
    _, ranked = quantizer.search(queries, nlist)  # lists by distance to each query
    probe_rank = np.argsort(ranked, axis=1)  # probe_rank[q, list] = how many probes reach it
    needed = np.array([probe_rank[q, list_of[exact_ids[q, :TOP]]] for q in range(len(queries))]) + 1
    exact_qids = qids[exact_ids[:, :TOP]]
    out = {"nlist": nlist, "build_s": build, "imbalance_factor": float(index.invlists.imbalance_factor()),
           "lists_holding_top20_median": float(np.median([len(set(list_of[r])) for r in exact_ids[:, :TOP]])),
           "probes_for_95pct_of_top20_median": float(np.median(np.percentile(needed, 95, axis=1))),
           "probes": []}
    for nprobe in PROBES:
        index.nprobe = nprobe
        _, found = index.search(queries, TOP + 1)
        recall = float(np.mean([len(np.intersect1d(w, g[:TOP])) / TOP for w, g in zip(exact_qids, found)]))
        out["probes"].append({"nprobe": nprobe, "recall_at_20_vs_exact": recall,
                              "H1": rank_metrics(hits(corpus, own, found))["H1"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", help="the bundle whose vectors are analysed, raw and centred to unit length")
    parser.add_argument("--encoders", nargs="+", default=[],
                        help="bundles trained on the same corpus with other encoder settings: their raw vectors compared")
    parser.add_argument("--nlist", type=int, default=1024)
    parser.add_argument("--render", action="store_true", help="only rewrite the tables from the saved results")
    args = parser.parse_args()
    result = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.render:
        render(result)
        return
    if not args.bundle and not args.encoders:
        parser.error("name a --bundle to analyse, or --encoders to compare")
    if args.bundle:
        bundle = Bundle.load(args.bundle)
        raw, corpus, own, positions, qids = bundle_vectors(bundle)
        variants = {"raw": raw, "centred_unit": unit_centred(raw, raw.mean(axis=0)).astype(np.float32)}
        result |= {"bundle": bundle.version, "corpus_size": len(corpus), "queries": len(own), "machine": machine(), "variants": {}}
        for name, vectors in variants.items():
            result["variants"][name] = analyse(vectors, corpus, own, positions, qids, args.nlist)
            print(name, result["variants"][name], flush=True)
    if args.encoders:
        result["encoders"] = {"machine": machine(), "runs": [encoder_run(Bundle.load(path), args.nlist) for path in args.encoders]}
    write_json(result, RESULTS)
    render(result)


def bundle_vectors(bundle: Bundle) -> tuple[np.ndarray, pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """The bundle's corpus vectors (corpus order), its corpus, and the test queries' qids and rows."""
    corpus = bundle.corpus
    qids = corpus["qid"].to_numpy()
    test = query_set(corpus, "test")
    return (np.ascontiguousarray(bundle.index.vectors(qids), dtype=np.float32), corpus, test["qid"].to_numpy(),
            test.index.to_numpy(), qids)


def analyse(vectors: np.ndarray, corpus, own: np.ndarray, positions: np.ndarray, qids: np.ndarray, nlist: int) -> dict:
    """Shape, exact test H@1 and inverted-file behaviour of one set of vectors (the test queries are rows ``positions``)."""
    queries = vectors[positions]
    _, exact_ids = faiss.knn(queries, vectors, TOP + 1)  # rows; the query itself is row 0
    return {"shape": shape_of(vectors, queries, exact_ids, np.random.default_rng(0)),
            "exact_H1": rank_metrics(hits(corpus, own, qids[exact_ids]))["H1"],
            "ivf": ivf_behaviour(vectors, queries, exact_ids, nlist, corpus, own, qids)}


def encoder_run(bundle: Bundle, nlist: int) -> dict:
    """``analyse`` of a bundle's raw vectors, with the encoder settings it was trained with."""
    if bundle.system != "cnn-sdml":
        raise SystemExit(f"bundle {bundle.version} is not a CNN trained with SDML ({bundle.system}): --encoders compares "
                         "bundles trained by `python -m qpr train` on the same corpus")
    raw, corpus, own, positions, qids = bundle_vectors(bundle)
    config = bundle.manifest.training["config"]
    run = {"bundle": bundle.version, "smoothing": config["smoothing"], "distance": config["distance"],
           "normalize": bundle.manifest.encoder_config["normalize"], "epochs": len(bundle.manifest.training["history"]),
           "val_auc": bundle.manifest.training["best_auc"]} | analyse(raw, corpus, own, positions, qids, nlist)
    print(run, flush=True)
    return run


def render(result: dict) -> None:
    """The tables of docs/SCALE.md's IVF section: the vectors' shape and recall / H@1 per probe
    count, and the encoder settings compared."""
    if "encoders" in result:
        render_encoders(result["encoders"])
    if "variants" not in result:
        return
    names = list(result["variants"])
    shape_keys = list(result["variants"][names[0]]["shape"]) + ["imbalance_factor", "lists_holding_top20_median",
                                                               "probes_for_95pct_of_top20_median"]
    lines = ["| measure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key in shape_keys:
        cells = [v["shape"].get(key, v["ivf"].get(key)) for v in result["variants"].values()]
        lines.append(f"| {key} | " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells) + " |")
    lines.append("| exact test H@1 | " + " | ".join(f"{v['exact_H1']:.3f}" for v in result["variants"].values()) + " |")
    rows = [{"variant": name, **p} for name, v in result["variants"].items() for p in v["ivf"]["probes"]]
    table = markdown_table(rows, [("variant", "vectors"), ("nprobe", "nprobe"),
                                  ("recall_at_20_vs_exact", "recall@20 vs exact (same vectors)"), ("H1", "test H@1")])
    nlist = result["variants"][names[0]]["ivf"]["nlist"]
    note = (f"{result['corpus_size']:,} questions, {result['queries']:,} test queries, `IVF{nlist},Flat`, bundle "
            f"{result['bundle']}; {result['machine']}.")
    replace_marked_section(ROOT / "docs" / "SCALE.md", "ivf-recall-data", f"{note}\n\n" + "\n".join(lines) + f"\n\n{table}")


def render_encoders(encoders: dict) -> None:
    """One row per bundle compared: its training settings, contrast, spread and recall per probe count."""
    rows = []
    for run in encoders["runs"]:
        recall = {f"r{p['nprobe']}": p["recall_at_20_vs_exact"] for p in run["ivf"]["probes"]}
        rows.append({"setting": f"smoothing {run['smoothing']}, {run['distance']}" + (", unit vectors" if run["normalize"] else ""),
                     "val_auc": run["val_auc"], "exact_H1": run["exact_H1"],
                     "contrast": run["shape"]["contrast_random_over_20th"],
                     "probes95": run["ivf"]["probes_for_95pct_of_top20_median"], **recall, "bundle": run["bundle"]})
    nlist = encoders["runs"][0]["ivf"]["nlist"]
    columns = [("setting", "SDML setting"), ("val_auc", "val ROC AUC"), ("exact_H1", "exact test H@1"),
               ("contrast", "random / 20th neighbour distance"), ("probes95", "probes for 95% of top 20 (median)")]
    columns += [(f"r{p}", f"recall@20, {p} probes") for p in PROBES] + [("bundle", "bundle")]
    note = f"Raw vectors of each bundle, `IVF{nlist},Flat` as above; {encoders['machine']}."
    replace_marked_section(ROOT / "docs" / "SCALE.md", "ivf-encoders", f"{note}\n\n{markdown_table(rows, columns)}")


if __name__ == "__main__":
    main()
