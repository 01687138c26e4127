"""Render docs/REPRODUCTION.md's tables (and the noise plot) from bench/results/reproduction.json.

The runs themselves come from `python -m qpr experiment NAME` (resumable); this script only reads
their results, so it can be re-run after every new arm. The paper's figures are quoted beside
ours as printed in its Tables 1-4 (the full Quora set with a 556k-question index: a different split
and index size from ours, so orderings compare, values do not). Its Tables 5-6 are on a private
open-domain QA set and are compared in the doc's text only.

    python -m bench.reproduction
"""

from __future__ import annotations

import json


import matplotlib

matplotlib.use("Agg")
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bench.common import ROOT, markdown_table, replace_marked_section
from qpr.data.corpus import data_dir, load_corpus
from qpr.research.experiment import NOISE_RATES
from qpr.data.noise import SPLIT_SUFFIX, inject_false_negatives
from qpr.training.sampling import cluster_disjoint_batches, cluster_members, epoch_pairs

RESULTS = ROOT / "bench" / "results" / "reproduction.json"
DOC = ROOT / "docs" / "REPRODUCTION.md"
PLOT = ROOT / "docs" / "reproduction" / "noise.png"
# (experiment, split, the arm's varying values) -> the paper's (P@1, MRR), as printed.
PAPER = {
    # Table 1: smoothing epsilon, validation.
    **{("smoothing", "val", (eps,)): v for eps, v in {
        0.0: (0.5568, 0.6217), 0.1: (0.5901, 0.6591), 0.2: (0.6030, 0.6762), 0.3: (0.6133, 0.6837),
        0.4: (0.6107, 0.6815)}.items()},
    # Table 2: batch size N, validation.
    **{("batch", "val", (n,)): v for n, v in {
        32: (0.5389, 0.6103), 64: (0.5710, 0.6410), 128: (0.6093, 0.6777), 256: (0.6112, 0.6833),
        512: (0.6133, 0.6837), 1024: (0.6081, 0.6764)}.items()},
    # Tables 3 (validation) and 4 (test): triplet loss with random negatives (EUC, SSD) and SDML (SSD).
    ("loss", "val", ("triplet", "euclidean", "random")): (0.4742, 0.5359),
    ("loss", "val", ("triplet", "squared", "random")): (0.5763, 0.6421),
    ("loss", "val", ("sdml", "squared", "in-batch")): (0.6133, 0.6837),
    ("loss", "test", ("triplet", "euclidean", "random")): (0.4641, 0.5297),
    ("loss", "test", ("triplet", "squared", "random")): (0.5507, 0.6265),
    ("loss", "test", ("sdml", "squared", "in-batch")): (0.6043, 0.6789),
}
ARM = ["loss", "distance", "negatives", "epsilon", "batch", "noise", "batching"]
VARIES = {"smoothing": ["epsilon"], "batch": ["batch"], "loss": ["loss", "distance", "negatives"],
          "noise": ["batching", "noise", "loss", "epsilon"]}


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per arm and split: mean H@1/H@10/MRR over seeds, the H@1 spread and the seeds."""
    grouped = runs.groupby(ARM + ["split"], sort=False)
    table = grouped[["H1", "H10", "MRR"]].mean()
    table["H1_spread"] = grouped["H1"].max() - grouped["H1"].min()
    table["seeds"] = grouped["seed"].agg(lambda s: ",".join(map(str, sorted(s))))
    table["epochs"] = grouped["epochs"].first()
    return table.reset_index()


def section(name: str, runs: pd.DataFrame) -> str:
    rows = summarise(runs[runs["experiment"] == name]).to_dict("records")
    if not rows:
        return f"### {name}\n\nNot run yet: `python -m qpr experiment {name}`.\n"
    columns = [(k, k) for k in VARIES[name]] + [
        ("split", "split"), ("H1", "H@1"), ("H10", "H@10"), ("MRR", "MRR"), ("H1_spread", "H@1 spread"),
        ("seeds", "seeds"), ("epochs", "epochs")]
    if name != "noise":
        for row in rows:
            key = tuple(row[k] for k in VARIES[name])  # numbers hash alike whatever their numpy type
            row["paper_P1"], row["paper_MRR"] = PAPER.get((name, row["split"], key), (None, None))
        columns += [("paper_P1", "paper P@1"), ("paper_MRR", "paper MRR")]
    if name == "noise":
        # How much each arm loses to the noise: H@1 relative to the same arm without noise.
        clean = {(r["batching"], r["loss"], r["epsilon"], r["split"]): r["H1"] for r in rows if r["noise"] == 0.0}
        for row in rows:
            base = clean.get((row["batching"], row["loss"], row["epsilon"], row["split"]))
            row["H1_change"] = None if base is None else row["H1"] - base
        columns.insert(columns.index(("H10", "H@10")), ("H1_change", "H@1 vs r=0"))
    return f"### {name}\n\n{markdown_table(rows, columns)}\n"


def noise_plot(runs: pd.DataFrame) -> bool:
    noise = summarise(runs[(runs["experiment"] == "noise") & (runs["split"] == "test")])
    if noise.empty:
        return False
    figure = Figure(figsize=(10, 4))
    panels = dict(zip(("random", "grouped"), figure.subplots(1, 2, sharey=True)))
    for (batching, loss, epsilon), arm in noise.groupby(["batching", "loss", "epsilon"]):
        label = f"SDML eps={epsilon:g}" if loss == "sdml" else "triplet (random, squared)"
        panels[batching].plot(arm["noise"], arm["H1"], marker="o", label=label)
    for batching, axes in panels.items():
        axes.set(xlabel="share of train clusters split (false negatives)", ylabel="test H@1",
                 title=f"{batching} batches")
        if axes.lines:
            axes.legend()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(PLOT, dpi=80, bbox_inches="tight")
    return True


def exposure(corpus: pd.DataFrame, batch_size: int = 512, seed: int = 0) -> str:
    """How often the injected false negatives actually serve as in-batch negatives.

    Builds one epoch's pairs and cluster-disjoint batches exactly as training does (random or
    grouped by clean cluster), on the noisy copy for each noise rate, and counts the (anchor,
    other positive) pairs of a batch that the clean clusters call paraphrases. Only those can
    teach the model to push paraphrases apart.
    """
    clean = corpus["cluster"].to_numpy(dtype=object, na_value=None)
    groups = corpus["cluster"].astype(object).fillna("").to_numpy()
    rows = []
    for batching in ("random", "grouped"):
        for rate in NOISE_RATES[1:]:
            noisy, chosen = inject_false_negatives(corpus, rate, seed=seed)
            rng = np.random.default_rng(seed)
            anchors, positives, owner = epoch_pairs(cluster_members(noisy, "train"), rng)
            group = groups[anchors] if batching == "grouped" else None
            negatives = false = 0
            for batch in cluster_disjoint_batches(owner, batch_size, rng, group):
                same = clean[anchors[batch]][:, None] == clean[positives[batch]][None, :]
                np.fill_diagonal(same, False)
                false += int(same.sum())
                negatives += len(batch) * (len(batch) - 1)
            moved = int(noisy["cluster"].str.endswith(SPLIT_SUFFIX).sum())
            rows.append({"batching": batching, "noise": f"{rate:g}", "split": f"{len(chosen):,}", "moved": f"{moved:,}",
                         "negatives": f"{negatives:,}", "false": f"{false:,}", "share": f"{false / negatives:.1e}",
                         "per_anchor": f"{false / len(anchors):.4f}"})
    return markdown_table(rows, [("batching", "batching"), ("noise", "r"), ("split", "clusters split"),
                                 ("moved", "questions moved"), ("negatives", "in-batch negatives / epoch"),
                                 ("false", "of them false negatives"), ("share", "share"), ("per_anchor", "per anchor")])


def main() -> None:
    runs = pd.DataFrame(json.loads(RESULTS.read_text())["runs"])
    runs["batching"] = runs["batching"].fillna("random") if "batching" in runs else "random"  # rows from before the field
    parts = [section(name, runs) for name in ("smoothing", "batch", "loss", "noise")]
    if noise_plot(runs):
        parts.append("![H@1 vs noise](reproduction/noise.png)\n")
    replace_marked_section(DOC, "reproduction", "\n".join(parts))
    corpus = load_corpus(data_dir() / "quora-lite")
    replace_marked_section(DOC, "exposure", f"One epoch of batches (N = 512, seed 0) on the noisy copies of "
                           f"Quora-lite's {int((corpus['split'] == 'train').sum()):,} training questions:\n\n{exposure(corpus)}")


if __name__ == "__main__":
    main()
