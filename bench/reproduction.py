"""Render docs/REPRODUCTION.md's tables (and the noise plot) from bench/results/reproduction.json.

The runs themselves come from `python -m qpr experiment NAME` (resumable); this script only reads
their results, so it can be re-run after every new arm. Paper figures are quoted only where we
have them (Table 1, full Quora validation set, 556k-question index: a different split and index
size from ours).

    python bench/reproduction.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from bench.common import ROOT, markdown_table, replace_marked_section  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "reproduction.json"
DOC = ROOT / "docs" / "REPRODUCTION.md"
PLOT = ROOT / "docs" / "reproduction" / "noise.png"
PAPER_TABLE_1 = {0.0: {"P@1": 0.5568, "MRR": 0.6217}, 0.1: {"P@1": 0.5901}, 0.2: {"P@1": 0.6030},
                 0.3: {"P@1": 0.6133, "MRR": 0.6837}, 0.4: {"P@1": 0.6107}}
ARM = ["loss", "distance", "negatives", "epsilon", "batch", "noise"]
VARIES = {"smoothing": ["epsilon"], "batch": ["batch"], "loss": ["loss", "distance", "negatives"],
          "noise": ["noise", "loss", "epsilon"]}


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
    if name == "smoothing":
        for row in rows:
            paper = PAPER_TABLE_1.get(row["epsilon"], {}) if row["split"] == "val" else {}
            row["paper_P1"], row["paper_MRR"] = paper.get("P@1"), paper.get("MRR")
    columns = [(k, k) for k in VARIES[name]] + [
        ("split", "split"), ("H1", "H@1"), ("H10", "H@10"), ("MRR", "MRR"), ("H1_spread", "H@1 spread"),
        ("seeds", "seeds"), ("epochs", "epochs")]
    if name == "smoothing":
        columns += [("paper_P1", "paper P@1 (val)"), ("paper_MRR", "paper MRR (val)")]
    return f"### {name}\n\n{markdown_table(rows, columns)}\n"


def noise_plot(runs: pd.DataFrame) -> bool:
    noise = summarise(runs[(runs["experiment"] == "noise") & (runs["split"] == "test")])
    if noise.empty:
        return False
    figure = Figure(figsize=(6, 4))
    axes = figure.subplots()
    for (loss, epsilon), arm in noise.groupby(["loss", "epsilon"]):
        label = f"SDML eps={epsilon:g}" if loss == "sdml" else "triplet (random, squared)"
        axes.plot(arm["noise"], arm["H1"], marker="o", label=label)
    axes.set(xlabel="share of train clusters split (false negatives)", ylabel="test H@1", title="H@1 vs label noise")
    axes.legend()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(PLOT, dpi=80, bbox_inches="tight")
    return True


def main() -> None:
    runs = pd.DataFrame(json.loads(RESULTS.read_text())["runs"])
    parts = [section(name, runs) for name in ("smoothing", "batch", "loss", "noise")]
    if noise_plot(runs):
        parts.append("![H@1 vs noise](reproduction/noise.png)\n")
    replace_marked_section(DOC, "reproduction", "\n".join(parts))


if __name__ == "__main__":
    main()
