"""Training a bundle in a background worker process, with its progress in a status file.

A ``TrainingJob`` is one folder (a project's ``training/``) holding::

    job.json        what to train: settings, the bundle to continue (if any), provenance, who asked
    corpus.parquet  the corpus to train on (e.g. the corrected clusters of an export)
    pairs.parquet   the export's judged pairs, which a continued encoder trains on too (if any)
    status.json     state, epoch, step, ETA, message: written by the worker, read by the page
    bundle/         the trained bundle, once the worker is done (saved atomically)
    worker.log      the worker's output

``start`` refuses while a worker is running (one training per job folder) and launches
``python -m workflows.background_training FOLDER`` in its own session with ``OMP_NUM_THREADS=1``, so
the app's searches keep a core and a restart of the app does not stop the training. ``status``
notices a worker that died without finishing and says so. The trained bundle is only a file in
this folder: serving it is the app's decision (``workflows.retraining.offer_trained`` / ``confirm``).

It sits in ``workflows`` (not ``qpr.serving``) because starting a training is a step of the
retraining workflow (``workflows.retraining.start_training`` exports the corrected clusters it
trains on), and trains as the in-process retrain does (``qpr.bundles.training``: ``retrain_bundle`` continues a
project's encoder, ``train_bundle`` trains its first).

States: ``running`` -> ``done`` (bundle written) | ``failed`` (message says why) | ``cancelled``;
``done`` -> ``decided`` once the app has served or discarded the result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

from qpr.bundles.bundle import Bundle
from qpr.bundles.training import retrain_bundle, train_bundle
from qpr.data.corpus import split_clusters
from qpr.model.encoder import EncoderConfig
from qpr.errors import QPRError
from qpr.fsutil.atomic import atomic_path
from qpr.settings import environment
from qpr.model.text import TextConfig
from qpr.training.loop import GAIN
from qpr.training.train import TrainConfig

JOB, STATUS, CORPUS, BUNDLE, LOG = "job.json", "status.json", "corpus.parquet", "bundle", "worker.log"
PAIRS = "pairs.parquet"
ACTIVE = ("starting", "running")
WRITE_EVERY_S = 0.5  # progress writes per batch are throttled to this interval
CANCEL_WAIT_S = 10.0
_CHILDREN: dict[int, subprocess.Popen] = {}  # workers this process started, reaped when polled


def _write(path: Path, content: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def with_held_out(corpus: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """``corpus`` as is when it has val clusters to stop training on, else its clusters split
    80:10:10 (``split_clusters``): clusters built by annotators from bare questions are all
    "train" (``annotations.constraints``), and training needs held-out clusters."""
    if ((corpus["split"] == "val") & corpus["cluster"].notna()).any():
        return corpus
    return split_clusters(corpus, seed)


def worker_alive(pid: int | None, folder: Path) -> bool:
    """Whether ``pid`` is a running (not zombie) worker of ``folder``."""
    if not pid:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:  # ours: ask the child itself (which also reaps it)
        if child.poll() is None:
            return True
        _CHILDREN.pop(pid, None)
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X") and __name__.split(".")[-1] in cmdline and str(folder.resolve()) in cmdline


class TrainingJob:
    """The background training of one folder (module doc)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def status(self) -> dict:
        """The job's state (``{"state": "none"}`` before any training); a worker that is gone
        while the state says running is reported as failed (and recorded so)."""
        for pid, child in list(_CHILDREN.items()):  # reap finished workers (no zombies left behind)
            if child.poll() is not None:
                _CHILDREN.pop(pid, None)
        status = self._read()
        if status.get("state") in ACTIVE and not worker_alive(status.get("pid"), self.folder):
            time.sleep(0.2)  # the worker may have written its last state just now
            status = self._read()
            if status.get("state") in ACTIVE:
                status |= {"state": "failed", "message": "the training worker stopped without finishing (killed, out of "
                                                         f"memory, or the machine restarted); see {self.folder / LOG} and "
                                                         "start the training again"}
                _write(self.folder / STATUS, status)
        return status

    def _read(self) -> dict:
        try:
            return json.loads((self.folder / STATUS).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"state": "none"}
        except (OSError, ValueError):
            return {"state": "failed", "message": f"{self.folder / STATUS} cannot be read; start the training again"}

    def start(self, corpus: pd.DataFrame, train: TrainConfig, text: TextConfig, encoder: EncoderConfig,
              continue_from: Path | None, provenance: dict, by: str, judged: pd.DataFrame | None = None) -> dict:
        """Launch a worker that trains on ``corpus`` (continuing the bundle at ``continue_from``
        with its own settings and on the ``judged`` pairs too, else anew with ``train`` / ``text`` /
        ``encoder``); refused while one runs. Returns the status."""
        current = self.status()
        if current["state"] in ACTIVE:
            raise QPRError(f"a training of this project is already running (started by {current.get('by', '?')}, "
                           f"{describe(current)}); wait for it or cancel it")
        if current["state"] == "done":
            raise QPRError("a trained model is waiting for a decision: use or discard it before training again")
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.folder / CORPUS) as tmp:
            corpus.to_parquet(tmp, index=False)
        (self.folder / PAIRS).unlink(missing_ok=True)  # an earlier job's pairs are not this one's
        if judged is not None:
            with atomic_path(self.folder / PAIRS) as tmp:
                judged.to_parquet(tmp, index=False)
        _write(self.folder / JOB, {"train": asdict(train), "text": asdict(text), "encoder": encoder.to_dict(),
                                   "continue_from": str(continue_from) if continue_from else None, "provenance": provenance,
                                   "by": by})
        status = {"state": "starting", "by": by, "started": time.time(), "epoch": 0, "max_epochs": train.max_epochs,
                  "message": "starting the worker"}
        _write(self.folder / STATUS, status)
        env = environment(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        with (self.folder / LOG).open("ab") as log:
            child = subprocess.Popen([sys.executable, "-m", "workflows.background_training", str(self.folder.resolve())],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                     cwd=Path(__file__).resolve().parents[1])
        _CHILDREN[child.pid] = child
        status["pid"] = child.pid
        # The worker rewrites the status as it goes; the pid is written here too so that a worker
        # dying before its first write is still found out.
        if self._read().get("state") == "starting":
            _write(self.folder / STATUS, status)
        return self.status()

    def cancel(self, by: str) -> dict:
        """Stop a running worker (its partial model is dropped); the status says who cancelled."""
        status = self.status()
        if status["state"] not in ACTIVE:
            raise QPRError("no training is running to cancel")
        pid = status["pid"]
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + CANCEL_WAIT_S
        while worker_alive(pid, self.folder) and time.monotonic() < deadline:
            time.sleep(0.1)
        if worker_alive(pid, self.folder):
            os.killpg(pid, signal.SIGKILL)
        status = self.status() | {"state": "cancelled", "message": f"cancelled by {by}"}
        _write(self.folder / STATUS, status)
        return status

    def result(self) -> Bundle:
        """The trained bundle of a ``done`` job."""
        return Bundle.load(self.folder / BUNDLE)

    def decided(self, what: str) -> None:
        """Record that the app served or discarded the trained bundle (``what`` says which)."""
        _write(self.folder / STATUS, self.status() | {"state": "decided", "message": what})


class Pace:
    """The measured pace of the current run, for its ETA: seconds per batch since its first
    batch (reading the corpus before it is not training) and seconds per validation (from an
    epoch's last batch to its check), the phase that made an ETA from batches alone too short.
    ``clock``: seconds, monotonic (a test gives its own)."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.first_batch: float | None = None
        self.batches = 0
        self.batch_s = 0.0  # batch time: from the first batch, less the validations
        self.validations: list[float] = []
        self._epoch_end: float | None = None

    def batch(self, step: int, steps: int) -> None:
        """One batch done (``step`` of the epoch's ``steps``)."""
        now = self.clock()
        if self.first_batch is None:
            self.first_batch = now
        else:
            self.batches += 1
            self.batch_s = now - self.first_batch - sum(self.validations)
        if step == steps:
            self._epoch_end = now

    def validated(self) -> None:
        """An epoch's validation is done."""
        if self._epoch_end is not None:
            self.validations.append(self.clock() - self._epoch_end)
            self._epoch_end = None

    def eta_s(self, epoch: int, step: int, steps: int, last_epoch: int) -> float | None:
        """Seconds left if the run ends after epoch ``last_epoch`` (the current one at least),
        each epoch with its validation; None until two batches have set a pace."""
        if not self.batches:
            return None
        per_batch = self.batch_s / self.batches
        per_validation = sum(self.validations) / len(self.validations) if self.validations else per_batch * steps / 10
        epochs_after = max(last_epoch - epoch, 0)
        return (steps - step + epochs_after * steps) * per_batch + (epochs_after + 1) * per_validation


def describe(status: dict, now: float | None = None) -> str:
    """The status in words: epoch, step, time left, or the outcome. The time left is counted down
    from when the worker wrote it (``updated``; ``now``: the time, a test gives its own): the
    likely time (``eta_s``: early stopping ends the run ``patience`` epochs after its best one,
    unless a later one does better) and the most (``eta_max_s``: every epoch). Once it has run
    out, or in a phase that has none (validating, the final evaluation, saving), it says so,
    never a stale number of seconds."""
    state = status.get("state", "none")
    if state in ACTIVE:
        parts = [f"epoch {status.get('epoch') or 1} of at most {status.get('max_epochs', '?')}"]
        if status.get("steps"):
            parts.append(f"step {status['step']} of {status['steps']}")
        if status.get("eta_s") is not None:
            waited = max(0.0, (time.time() if now is None else now) - status.get("updated", 0.0))
            left, most = status["eta_s"] - waited, status.get("eta_max_s", status["eta_s"]) - waited
            likely = f"about {left:.0f} s left" if left >= 1 else "finishing"
            parts.append(likely + (f" if no later epoch does better (at most {most:.0f} s)" if most - left >= 1 else ""))
        return ", ".join(parts) + (f"; {status['message']}" if status.get("message") else "")
    return status.get("message") or state


def run(folder: Path) -> None:
    """The worker: train as ``job.json`` says, writing progress to ``status.json``; save the
    bundle, then mark the job done (or failed with the reason)."""
    torch.set_num_threads(1)  # the worker's own threads: one, beside the app's
    job = json.loads((folder / JOB).read_text(encoding="utf-8"))
    # A job.json written before the provenance had its name holds it as "labels".
    provenance = job["provenance"] if "provenance" in job else job["labels"]
    status = json.loads((folder / STATUS).read_text(encoding="utf-8")) | {"state": "running", "pid": os.getpid()}
    started, last, pace = time.monotonic(), 0.0, Pace()

    def report(**fields) -> None:
        nonlocal last
        status.update(fields, updated=time.time())
        _write(folder / STATUS, status)
        last = time.monotonic()

    patience, best = job["train"]["patience"], {"epoch": 0, "score": -1.0}

    def times_left(epoch: int, step: int, steps: int) -> dict:
        # Early stopping ends the run `patience` epochs after its best one, unless a later one does
        # better (the first epoch always does); every epoch is the most it can take.
        likely = min(status["max_epochs"], max(best["epoch"], 1) + patience)
        return {"eta_s": pace.eta_s(epoch, step, steps, likely),
                "eta_max_s": pace.eta_s(epoch, step, steps, status["max_epochs"])}

    def on_batch(epoch: int, step: int, steps: int) -> None:
        pace.batch(step, steps)
        if step == steps:  # the epoch's validation follows, then another epoch or the end
            report(epoch=epoch, step=step, steps=steps, message=f"validating epoch {epoch}", **times_left(epoch, step, steps))
        elif time.monotonic() - last >= WRITE_EVERY_S:
            report(epoch=epoch, step=step, steps=steps, message="training the encoder", **times_left(epoch, step, steps))

    def on_epoch(row: dict) -> None:
        pace.validated()
        if row["val_auc"] > best["score"] + GAIN:
            best.update(epoch=row["epoch"], score=row["val_auc"])
        # Whether another epoch follows is the trainer's call (early stopping): no time is
        # promised until its first batch; after the last possible epoch, the end is near.
        then = ("finishing: the index and the final evaluation on held-out questions" if row["epoch"] >= status["max_epochs"]
                else f"epoch {row['epoch']} checked; next, another epoch or the final evaluation")
        report(last_val_auc=row["val_auc"], best_epoch=best["epoch"], eta_s=None, eta_max_s=None, message=then)

    report(message="reading the corpus")
    try:
        corpus = with_held_out(pd.read_parquet(folder / CORPUS))
        if job["continue_from"]:
            judged = pd.read_parquet(folder / PAIRS) if (folder / PAIRS).is_file() else None
            bundle = retrain_bundle(Bundle.load(job["continue_from"]), corpus, provenance=provenance,
                                    max_epochs=job["train"]["max_epochs"], progress=False, on_epoch=on_epoch,
                                    on_batch=on_batch, judged=judged)
        else:
            bundle = train_bundle(corpus, TrainConfig(**job["train"]), TextConfig(**job["text"]),
                                  EncoderConfig(**job["encoder"]), provenance=provenance, progress=False,
                                  on_epoch=on_epoch, on_batch=on_batch)
        report(message="saving the trained model", eta_s=None, eta_max_s=None)
        bundle.save(folder / BUNDLE)
    except QPRError as err:
        report(state="failed", message=f"training stopped: {err}")
        return
    except Exception as err:
        report(state="failed", message=f"training crashed ({type(err).__name__}: {err}); see {folder / LOG}")
        raise
    report(state="done", version=bundle.version, seconds=time.monotonic() - started,
           message=f"trained model {bundle.version} is ready")


if __name__ == "__main__":
    run(Path(sys.argv[1]))
