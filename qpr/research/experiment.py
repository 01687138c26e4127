"""Paper-reproduction experiments: named sets of training arms, run resumably into one JSON file.

An arm is one training configuration (loss, distance, negatives, epsilon, batch size, noise rate,
seed). ``run_experiment`` trains every arm of a named experiment for the same fixed number of
epochs (keeping the epoch with the best validation ROC AUC), evaluates val and test with an exact
index over the clean corpus, and appends one row per split to the results file. Arms already in
the file are skipped unless ``force``; the file is rewritten atomically after each arm, so an
interrupted run loses at most the arm in progress. An arm whose training configuration already ran
under another experiment's name (SDML eps 0.3, N=512 is in four of them) is copied, not retrained:
training is seeded, so it would be the same model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from qpr.bundles.bundle import Bundle
from qpr.model.encoder import PAPER_ENCODER
from qpr.errors import QPRError
from qpr.evaluation.metrics import evaluate
from qpr.fsutil.atomic import atomic_path
from qpr.retrieval.index import IndexConfig
from qpr.data.noise import inject_false_negatives
from qpr.model.text import PAPER_TEXT
from qpr.training.train import TrainConfig, train

NOISE_RATES = (0.0, 0.1, 0.2, 0.4)


@dataclass(frozen=True)
class Arm:
    """One configuration; ``negatives`` is "in-batch" for SDML, "random" or "hard" for triplet.

    ``batching`` "grouped" batches the pairs of one clean cluster together (``qpr.training.train``'s
    ``batch_groups``), so that the halves of a split cluster meet as false negatives in a batch;
    "random" is the trainer's ordinary batching.
    """

    experiment: str
    loss: str = "sdml"
    distance: str = "squared"
    negatives: str = "in-batch"
    epsilon: float = 0.3
    batch: int = 512
    noise: float = 0.0
    batching: str = "random"
    seed: int = 0

    def train_config(self, epochs: int) -> TrainConfig:
        # patience == epochs: every arm trains exactly `epochs` epochs and keeps its best one.
        return TrainConfig(
            loss=self.loss, smoothing=self.epsilon if self.loss == "sdml" else 0.0,
            distance=self.distance, negatives="random" if self.negatives == "in-batch" else self.negatives,
            batch_size=self.batch, max_epochs=epochs, patience=epochs, seed=self.seed,
        )


def _triplet(experiment: str, negatives: str, distance: str, noise: float = 0.0, batching: str = "random") -> Arm:
    return Arm(experiment, loss="triplet", distance=distance, negatives=negatives, epsilon=0.0, noise=noise,
               batching=batching)


EXPERIMENTS: dict[str, list[Arm]] = {
    "smoothing": [Arm("smoothing", epsilon=e) for e in (0.0, 0.1, 0.2, 0.3, 0.4)],
    "batch": [Arm("batch", batch=n) for n in (32, 64, 128, 256, 512, 1024)],
    "loss": [_triplet("loss", neg, d) for neg in ("random", "hard") for d in ("euclidean", "squared")]
    + [Arm("loss", distance=d) for d in ("euclidean", "squared")],
    "noise": [
        arm
        for batching in ("random", "grouped")
        for r in NOISE_RATES
        for arm in (Arm("noise", noise=r, batching=batching), Arm("noise", epsilon=0.0, noise=r, batching=batching),
                    _triplet("noise", "random", "squared", r, batching))
    ],
}


def arms(name: str, seeds: list[int], where: dict[str, str] | None = None) -> list[Arm]:
    """The arms of experiment ``name`` ("all" for every experiment), once per seed.

    ``where`` keeps only arms whose fields equal the given values, e.g. {"noise": "0"} to run a
    second seed of just the noise-free arms.
    """
    names = list(EXPERIMENTS) if name == "all" else [name]
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise QPRError(f"unknown experiment {unknown[0]!r}: choose from {', '.join(EXPERIMENTS)} or all")
    selected = [Arm(**(asdict(arm) | {"seed": seed})) for n in names for arm in EXPERIMENTS[n] for seed in seeds]
    for key, text in (where or {}).items():
        if key not in Arm.__dataclass_fields__:
            raise QPRError(f"cannot select arms by {key!r}: use one of {', '.join(Arm.__dataclass_fields__)}")
        kind = type(getattr(Arm(""), key))
        try:
            value = kind(text)
        except ValueError as err:
            raise QPRError(f"{key}={text!r} is not a valid {kind.__name__}") from err
        selected = [arm for arm in selected if getattr(arm, key) == value]
    if not selected:
        raise QPRError(f"no arm of {name!r} has {', '.join(f'{k}={v}' for k, v in where.items())}")
    return selected


def _arm_of(row: dict) -> Arm:
    # Rows written before a field existed get its default (e.g. batching "random").
    return Arm(**{key: row.get(key, field.default) for key, field in Arm.__dataclass_fields__.items()})


def _config(arm: Arm) -> Arm:
    """The arm without its experiment name: what determines the trained model."""
    return Arm(**(asdict(arm) | {"experiment": ""}))


def load_results(path: Path) -> dict:
    if not Path(path).is_file():
        return {"runs": []}
    try:
        return json.loads(Path(path).read_text())
    except ValueError as err:
        raise QPRError(f"{path} is not valid JSON ({err}); fix or move it before resuming") from err


def run_arm(arm: Arm, corpus: pd.DataFrame, epochs: int, progress: bool = True) -> list[dict]:
    """Train one arm and return its val and test rows."""
    train_corpus, _ = inject_false_negatives(corpus, arm.noise, seed=arm.seed)
    groups = corpus["cluster"] if arm.batching == "grouped" else None
    result = train(train_corpus, arm.train_config(epochs), text_config=PAPER_TEXT, encoder_config=PAPER_ENCODER,
                   batch_groups=groups, progress=progress, return_on_interrupt=False)
    # The index and the queries use the clean corpus: noise only ever touches training labels.
    retriever = Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("Flat")).dense_retriever()
    rows = []
    for split in ("val", "test"):
        metrics = evaluate(retriever, corpus, split)
        rows.append(asdict(arm) | {"split": split} | metrics | {
            "epochs": len(result.history), "best_epoch": result.best_epoch, "val_auc": result.best_auc,
            "train_seconds": round(result.seconds, 1),
        })
    return rows


def run_experiment(
    name: str, corpus: pd.DataFrame, results_path: Path, epochs: int, seeds: list[int], force: bool = False,
    progress: bool = True, log: Callable[[str], None] = print, where: dict[str, str] | None = None,
) -> list[dict]:
    """Run every arm of ``name`` (restricted by ``where``, see ``arms``) not yet in ``results_path``
    (all of them with ``force``)."""
    results = load_results(results_path)
    finished = [row for row in results["runs"] if row.get("epochs") == epochs]
    done = {_arm_of(row) for row in finished}
    new_rows = []
    for arm in arms(name, seeds, where):
        if arm in done and not force:
            log(f"skip (done): {arm}")
            continue
        same_model = [row for row in finished if _config(_arm_of(row)) == _config(arm)]
        if same_model and not force:
            log(f"reuse ({same_model[0]['experiment']}): {arm}")
            rows = [row | {"experiment": arm.experiment} for row in same_model if row["experiment"] == same_model[0]["experiment"]]
        else:
            log(f"run: {arm}")
            rows = run_arm(arm, corpus, epochs, progress)
        results["runs"] = [r for r in results["runs"] if _arm_of(r) != arm] + rows
        with atomic_path(results_path) as tmp:
            tmp.write_text(json.dumps(results, indent=2) + "\n")
        new_rows += rows
    return new_rows
