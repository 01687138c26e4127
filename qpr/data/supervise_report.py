"""The report of a distant-supervision run: what the log held, what the coherence filter removed,
and random samples of kept and removed clusters for a person to spot-check.

``write_report`` writes one folder atomically: ``summary.json``, ``report.md``,
``coherence.png`` (histogram and coherence against cluster size), ``thresholds.csv`` and
``kept_sample.csv`` / ``removed_sample.csv`` (one row per sampled cluster).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from qpr.fsutil.atomic import atomic_path
from qpr.data.spreadsheet import write_csv
from qpr.data.supervise import Supervision, threshold_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SIZE_BINS = [2, 3, 4, 5, 10, 20, 50, 100, np.inf]
SIZE_LABELS = ["2", "3", "4", "5-9", "10-19", "20-49", "50-99", "100+"]
SAMPLE_CLUSTERS = 100  # per sample file: 100 kept + 100 removed = the paper's 200 spot checks
SAMPLE_QUESTIONS = 10  # questions shown per sampled cluster
TEXT_CHARS = 120  # answers are cut to this length in samples and tables


def _clip(text: str, chars: int = TEXT_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def clusters_by_size(sizes: pd.Series) -> dict:
    """Number of clusters per size bin (2, 3, 4, 5-9, ... 100+)."""
    binned = pd.cut(sizes, SIZE_BINS, right=False, labels=SIZE_LABELS)
    return {label: int(n) for label, n in binned.value_counts(sort=False).items()}


def _with_questions(clusters: pd.DataFrame, per_cluster: int) -> pd.DataFrame:
    """``clusters`` with their answers clipped and their first questions (" | "-joined)."""
    return clusters.assign(
        answers=clusters["answers"].map(_clip), questions=clusters["questions"].map(lambda q: " | ".join(q[:per_cluster]))
    )[["cluster", "size", "coherence", "answers", "questions"]]


def sample_clusters(result: Supervision, kept: bool, n: int = SAMPLE_CLUSTERS) -> pd.DataFrame:
    """A random (seeded) sample of up to ``n`` kept or removed clusters, for spot checks."""
    pool = result.clusters[result.clusters["kept"] == kept]
    sample = pool.sample(n=min(n, len(pool)), random_state=result.seed).sort_values("coherence")
    return _with_questions(sample, SAMPLE_QUESTIONS)


def summary(result: Supervision, name: str, largest_removed: int = 5) -> dict:
    """Counts of the run as plain JSON-able values (what ``report.md`` and benchmarks show)."""
    clusters, corpus = result.clusters, result.corpus
    kept, removed = clusters[clusters["kept"]], clusters[~clusters["kept"]]
    in_clusters = corpus[corpus["cluster"].notna()]
    examples = _with_questions(removed.nlargest(largest_removed, "size"), 6)
    return {
        "name": name,
        "seed": result.seed,
        "min_coherence": result.min_coherence,
        "multi_answer": result.multi_answer,
        **result.counts,
        "clusters": int(len(clusters)),
        "clustered_questions": int(clusters["size"].sum()),
        "clusters_kept": int(len(kept)),
        "questions_kept": int(kept["size"].sum()),
        "clusters_removed": int(len(removed)),
        "questions_removed": int(removed["size"].sum()),
        "clusters_by_size": {"all": clusters_by_size(clusters["size"]), "kept": clusters_by_size(kept["size"])},
        "coherence": {stat: float(getattr(clusters["coherence"], stat)()) for stat in ("min", "median", "max")}
        if len(clusters) else {},
        "thresholds": threshold_table(clusters).to_dict(orient="records"),
        "splits": {
            split: {"clusters": int(group["cluster"].nunique()), "questions": int(len(group))}
            for split, group in in_clusters.groupby("split")
        },
        "largest_removed": examples.to_dict(orient="records"),
    }


def coherence_figure(result: Supervision, name: str) -> Figure:
    """Histogram of cluster coherence (kept / removed) and coherence against cluster size.

    The right panel shows the bound c >= 1/n: n questions can never score below 1/n, so a
    threshold t can only remove clusters of more than 1/t questions.
    """
    # matplotlib is imported when a figure is drawn, not with the module: every `qpr` command
    # imports this module, and matplotlib was 14% of the command line's start, before a long
    # command (the general build) can show any progress.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    clusters = result.clusters
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    hist, scatter = fig.subplots(1, 2)
    bins = np.linspace(0, 1, 51)
    hist.hist([clusters.loc[clusters["kept"], "coherence"], clusters.loc[~clusters["kept"], "coherence"]],
              bins=bins, stacked=True, label=["kept", "removed"], color=["tab:blue", "tab:red"])
    hist.axvline(result.min_coherence, color="black", linestyle="--", linewidth=1, label=f"threshold {result.min_coherence:g}")
    hist.set(xlabel="coherence c", ylabel="clusters", title=f"{name}: {len(clusters)} clusters")
    hist.legend(fontsize="small")
    colors = np.where(clusters["kept"], "tab:blue", "tab:red")
    scatter.scatter(clusters["size"], clusters["coherence"], s=8, c=colors, alpha=0.6)
    n = np.arange(2, int(clusters["size"].max()) + 1 if len(clusters) else 3)
    scatter.plot(n, 1 / n, color="gray", linewidth=1, label="1/n (lowest possible)")
    scatter.axhline(result.min_coherence, color="black", linestyle="--", linewidth=1)
    scatter.set(xscale="log", xlabel="questions in cluster (n)", ylabel="coherence c", ylim=(0, 1.02),
                title="coherence against size")
    scatter.set_xticks([t for t in (2, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= n[-1]])
    scatter.xaxis.set_major_formatter(ScalarFormatter())
    scatter.xaxis.set_minor_formatter(NullFormatter())
    scatter.legend(fontsize="small")
    return fig


def _table(rows: list[dict], columns: list[str]) -> str:
    def cell(value) -> str:
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(info: dict, files: str = ".", heading: str = "##") -> str:
    """One data set's report as markdown; ``files`` is the folder of its PNG and CSVs, relative
    to where the markdown lives."""
    by_size = [{"size": label, "clusters": info["clusters_by_size"]["all"][label],
                "kept": info["clusters_by_size"]["kept"][label]} for label in SIZE_LABELS]
    splits = [{"split": s, **info["splits"][s]} for s in ("train", "val", "test") if s in info["splits"]]
    lines = [
        f"{heading} {info['name']}",
        "",
        f"- Log: {info['log_rows']} rows; {info['empty_questions']} without words dropped, "
        f"{info['duplicate_questions']} identical questions merged: **{info['questions']} questions**, "
        f"**{info['answers']} distinct answers**; {info['questions_without_answer']} questions without an answer, "
        f"{info['questions_with_several_answers']} with several (policy: {info['multi_answer']}).",
        f"- Clusters of 2+ questions: **{info['clusters']}** holding {info['clustered_questions']} questions; "
        f"the other {info['questions'] - info['clustered_questions']} questions are in no cluster "
        "(they stay in the index, split `none`).",
        f"- Coherence filter c >= {info['min_coherence']:g}: kept **{info['clusters_kept']}** clusters "
        f"({info['questions_kept']} questions), removed {info['clusters_removed']} "
        f"({info['questions_removed']} questions, kept in the index without a cluster).",
        f"- Split (seed {info['seed']}): "
        + ", ".join(f"{s['split']} {s['clusters']} clusters / {s['questions']} questions" for s in splits)
        + f"; {info['leaked_questions_removed']} val/test questions removed because train has them.",
        "",
        f"![coherence of {info['name']}]({files}/coherence.png)",
        "",
        _table(by_size, ["size", "clusters", "kept"]),
        "",
        "Clusters and questions each threshold keeps:",
        "",
        _table(info["thresholds"], ["min_coherence", "clusters_kept", "questions_kept"]),
        "",
    ]
    if info["largest_removed"]:
        lines += ["The largest clusters the filter removed (first questions shown):", "",
                  _table(info["largest_removed"], ["answers", "size", "coherence", "questions"]), ""]
    if info["samples"]:
        lines += [f"Spot-check samples: [kept clusters]({files}/kept_sample.csv), "
                  f"[removed clusters]({files}/removed_sample.csv).", ""]
    else:
        lines += ["Spot-check samples are not kept here (the logs' licences do not allow redistributing them): "
                  f"`python -m qpr supervise --preset {info['name']} --out clusters.tsv --report DIR` writes "
                  "them locally.", ""]
    return "\n".join(lines)


REPORT_FILES = {"summary.json", "report.md", "thresholds.csv", "kept_sample.csv", "removed_sample.csv", "coherence.png"}


def is_report(folder: Path) -> bool:
    """Whether ``folder`` is a report ``write_report`` wrote: its summary, and none but its files."""
    names = {p.name for p in Path(folder).iterdir()}
    return "summary.json" in names and names <= REPORT_FILES


def write_report(result: Supervision, directory: str | Path, name: str, samples: bool = True) -> Path:
    """Write the report folder for ``result`` atomically (replacing an older report, never a
    folder holding anything else: QPRError); returns it.

    ``samples=False`` leaves out the spot-check CSVs, which quote the log verbatim: for reports
    committed about data sets that may not be redistributed.
    """
    info = summary(result, name) | {"samples": samples}
    with atomic_path(directory, directory=True, replaceable=is_report, what="report of `qpr supervise`") as tmp:
        (tmp / "summary.json").write_text(json.dumps(info, indent=2, ensure_ascii=False))
        (tmp / "report.md").write_text(render_markdown(info, heading="#"))
        write_csv(threshold_table(result.clusters), tmp / "thresholds.csv")
        if samples:
            write_csv(sample_clusters(result, kept=True), tmp / "kept_sample.csv")
            write_csv(sample_clusters(result, kept=False), tmp / "removed_sample.csv")
        coherence_figure(result, name).savefig(tmp / "coherence.png", dpi=80)
    return Path(directory)
