"""``qpr-annotations`` (or ``python -m workflows``): export corrected clusters, retrain a bundle on them (compare,
and with ``--confirm`` save and record the swap), summarise the annotation database, and measure the annotation loop
with a simulated annotator (``loop``, see ``workflows.simulated_loop``). Export and retrain go through the app's
retraining workflow (``workflows.retraining``), retrain on a ``workflows.project.Project`` whose home is the
``--out`` folder (``FolderHome``); ``export --dataset``/``--push`` also write the export as a Hub
dataset (``workflows.hub_export``). ``backup`` and ``restore`` copy the database while it is in
use (``annotations.backup``).

Errors a user must fix (bad URL, unreachable database, unknown bundle version, wrong file name)
print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path

from annotations.agreement import agreement
from annotations.backup import backup, restore
from annotations.db import database_url, open_store
from annotations.errors import AnnotationError
from annotations.export import FORMATS, manifest_path
from annotations.simulation.strategies import STRATEGIES
from qpr.bundles.bundle import Bundle, check_target
from qpr.bundles.training import verdict
from qpr.cli.main import run
from qpr.data.corpus import data_dir, load_corpus
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from qpr.training.train import TrainConfig
from workflows import hub_export, retraining
from workflows.project import FolderHome, Project
from workflows.simulated_loop import LoopConfig, run_loop


def cmd_export(args: argparse.Namespace) -> int:
    if args.push:
        hub_export.check_repo(args.push)  # before anything is exported
    with open_store(args.db, project=args.project) as store:
        version, corpus = store.corpora.snapshot(args.bundle_version)
        done = retraining.export_corrected(store, corpus, version, args.format, out=args.out)
    out, manifest = done.path, done.manifest
    print(f"{out}: {manifest['questions']} questions, {manifest['clusters_before']} -> {manifest['clusters_after']} "
          f"clusters ({len(manifest['merges'])} merges, {len(manifest['splits'])} splits, "
          f"{len(manifest['conflicts'])} conflicts for review) from "
          f"{len(manifest['judgment_ids'])} judgments on bundle {version}; manifest {manifest_path(out)}")
    if args.dataset:
        print(f"{hub_export.write_dataset(done, args.project, args.dataset)}: written as a Hub dataset folder")
    if args.push:
        url = hub_export.push_export(done, args.push, args.project, private=args.private)
        print(f"pushed to the Hub dataset https://huggingface.co/datasets/{args.push} ({url}); load it with "
              f"datasets.load_dataset({args.push!r}, 'clusters') (or 'pairs', 'anchor-positive', 'triplets')")
    return 0


def cmd_retrain(args: argparse.Namespace) -> int:
    """The app's Retrain tab on the command line (``workflows.retraining``): retrain, compare, and
    confirm only when asked."""
    if args.epochs is not None and args.epochs < 1:
        raise AnnotationError(f"--epochs must be 1 or more, got {args.epochs}")
    # Before minutes of training, as `qpr train` does: --out must be a new path or a bundle.
    check_target(args.out)
    old = Bundle.load(args.bundle)
    exports = args.exports or args.out.parent / "exports"
    on_epoch = (lambda row: None) if args.quiet else (
        lambda row: print(f"epoch {row['epoch']}: validation ROC AUC {row['val_auc']:.4f}", file=sys.stderr))
    with open_store(args.db, project=args.project) as store:
        # The project as this command sees it: the bundle given, served only while it runs, saved at --out.
        project = Project(args.project, args.project, ServedModel(old), store, FolderHome(args.out))
        proposal = retraining.retrain(project, exports, args.epochs, on_epoch=on_epoch, fmt=args.format)
        comparison, new = proposal.candidate.comparison, proposal.candidate.served.bundle
        print(f"exported {proposal.export.path} ({len(proposal.export.manifest['judgment_ids'])} judgments); "
              f"retrained {old.version} -> {new.version}")
        print(comparison.round(4).to_string(index=False))
        print(verdict(comparison)[0])
        if not args.confirm:
            print("not confirmed: no bundle saved, no swap recorded (run again with --confirm to use it)")
            return 0
        who = args.by or getpass.getuser()
        done = retraining.confirm(project, who)
    print(f"saved {done.bundle.version} at {done.path}; recorded {who}'s swap from {done.replaced}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_store(args.db, project=args.project) as store:
        every = store.judgments.frame(current_only=False)
        summary = {
            "bundle_versions": store.corpora.versions()["version"].tolist(),
            "judgments": {"recorded": len(every), "current": int(every["is_current"].sum())},
            "annotators": {name: store.judgments.progress(name) for name in store.judgments.annotators()},
            "agreement": agreement(store).to_dict("records"),
        }
    print(json.dumps(summary, indent=2))
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    done = backup(database_url(args.db), args.out)
    held = f"{done.judgments} judgments (last id {done.last_judgment_id})" if done.judgments >= 0 else "a pg_dump archive"
    print(f"backed up to {done.path} at {done.at}: {held}, checked")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    done = restore(args.backup, database_url(args.db), replace=args.replace)
    print(f"restored {done.path} from {args.backup}: {done.judgments} judgments (last id {done.last_judgment_id}), "
          "checked against the backup")
    return 0


def cmd_loop(args: argparse.Namespace) -> int:
    if args.db:
        raise AnnotationError("loop records simulated judgments in its own database under --out; leave out --db")
    config = LoopConfig(
        strategy=args.strategy, budget=args.budget, rounds=args.rounds, noise=args.noise, k=args.k,
        error_rate=args.error_rate, annotator=args.annotator, warm_start=args.warm_start, seed=args.seed,
    )
    train_config = TrainConfig(batch_size=args.batch_size, max_epochs=args.epochs, seed=args.seed)
    log = (lambda _: None) if args.quiet else (lambda line: print(line, file=sys.stderr))
    summary = run_loop(load_corpus(args.data, seed=args.seed), config, train_config, args.out,
                       with_clean=args.with_clean, progress=not args.quiet, log=log)
    print(json.dumps(summary, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qpr-annotations", description="Annotation database tools.")
    parser.add_argument("--db", help="SQLAlchemy database URL (default: $QPR_DB_URL, else sqlite:///data/annotations.db)")
    parser.add_argument("--project", default=DEMO, help="the project whose judgments are read and recorded (its slug, "
                        "as in the app's ?project= address; default: the demo): each project's are its own")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("export", help="write corrected clusters, training pairs and a manifest",
                       description="Merge clusters by the current judgments (see docs/ANNOTATIONS.md) over the corpus "
                       "registered for a bundle version and write it as a cluster file that `python -m qpr train "
                       "--data FILE` reads, plus FILE's .pairs and .manifest.json companions.")
    p.add_argument("--db", default=argparse.SUPPRESS, help="database URL (as above)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--out", required=True, help="cluster file to write; its extension must match --format")
    p.add_argument("--bundle-version", help="whose registered corpus to correct (default: the newest registered)")
    p.add_argument("--dataset", type=Path, metavar="DIR", help="also write the export as a Hub dataset folder (Parquet per "
                   "split, sentence-transformers' anchor-positive and triplets tables, a dataset card) at DIR")
    p.add_argument("--push", metavar="OWNER/NAME", help="also push that dataset to this Hub dataset repository (a new "
                   "commit each time; needs a write token: huggingface-cli login, or HF_TOKEN)")
    p.add_argument("--private", action="store_true", help="create the --push repository private")
    p.add_argument("--project", default=argparse.SUPPRESS, help="the project (as above), also named in the dataset card")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("retrain", help="retrain a bundle on its corrected clusters, compare, and --confirm to save it",
                       description="Export the corrected clusters of the bundle's corpus (registered in the database "
                       "under its version), continue its encoder on them, compare old and new on the same held-out "
                       "clusters and print the comparison and the verdict. The export is written and recorded either "
                       "way; only with --confirm is the new bundle saved (atomically, at --out) and the swap recorded.")
    p.add_argument("--db", default=argparse.SUPPRESS, help="database URL (as above)")
    p.add_argument("--bundle", required=True, type=Path, metavar="DIR", help="bundle folder to retrain")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="bundle folder to save the new bundle in: new, or a bundle")
    p.add_argument("--epochs", type=int, metavar="N", help="maximum epochs (default: as many as the bundle was trained with)")
    p.add_argument("--format", choices=FORMATS, default="parquet", help="format of the export")
    p.add_argument("--exports", type=Path, metavar="DIR", help="folder for the export's files (default: exports/ beside --out)")
    p.add_argument("--confirm", action="store_true", help="save the new bundle at --out and record the swap")
    p.add_argument("--by", metavar="NAME", help="who decided, as recorded with the swap (default: the login name)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_retrain)

    p = sub.add_parser("stats", help="judgment counts, progress per annotator and agreement as JSON")
    p.add_argument("--db", default=argparse.SUPPRESS, help="database URL (as above)")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("backup", help="copy the annotation database to a new file while the app runs",
                       description="A consistent copy of the database taken while it is in use (SQLite: its online "
                       "backup API; PostgreSQL: pg_dump --format=custom), checked, written atomically. The app's "
                       "status line shows the last backup.")
    p.add_argument("--db", default=argparse.SUPPRESS, help="database URL (as above)")
    p.add_argument("--out", required=True, type=Path, metavar="FILE", help="new file to write the backup to")
    p.set_defaults(func=cmd_backup)

    p = sub.add_parser("restore", help="restore a SQLite backup into the annotation database",
                       description="Copy a backup written by `backup` into --db: a new database, or with --replace an "
                       "existing one (in one transaction; a running app then sees the restored database). First checks "
                       "that the backup is an annotation database of this version (integrity, schema revision, every "
                       "table, index and constraint as the migrations make them, no trigger or view of its own, rows "
                       "that keep the constraints) and refuses it otherwise, changing nothing; afterwards, that the "
                       "result holds exactly the backup's judgments. PostgreSQL dumps are restored with pg_restore.")
    p.add_argument("--db", default=argparse.SUPPRESS, help="database URL (as above)")
    p.add_argument("backup", type=Path, metavar="FILE", help="backup file written by `qpr-annotations backup`")
    p.add_argument("--replace", action="store_true", help="replace an existing database (its judgments not in the backup are lost)")
    p.set_defaults(func=cmd_restore)

    defaults = LoopConfig()
    p = sub.add_parser("loop", help="noisy clusters -> simulated judgments -> merge -> export -> retrain -> evaluate",
                       description="Split a share of the training clusters (known false negatives), train on them, then "
                       "per round let a simulated annotator that knows the true clusters judge --budget candidate pairs "
                       "picked by --strategy, merge and export the corrected clusters, retrain and score the untouched "
                       "test clusters. Writes the judgment database, the exports and loop.json into --out.")
    p.add_argument("--budget", type=int, default=defaults.budget, help="judgments per round")
    p.add_argument("--strategy", choices=STRATEGIES, default=defaults.strategy, help="how candidate pairs are picked")
    p.add_argument("--rounds", type=int, default=defaults.rounds)
    p.add_argument("--noise", type=float, default=defaults.noise, help="share of eligible training clusters split in two")
    p.add_argument("--data", type=Path, default=data_dir() / "quora-lite", help="clean clusters (default: the quora-lite split)")
    p.add_argument("--epochs", type=int, default=TrainConfig().max_epochs, help="maximum epochs per training")
    p.add_argument("--batch-size", type=int, default=TrainConfig().batch_size)
    p.add_argument("--k", type=int, default=defaults.k, help="results per training question to pick candidates from")
    p.add_argument("--error-rate", type=float, default=defaults.error_rate, help="share of wrong simulated answers")
    p.add_argument("--annotator", default=defaults.annotator, help="name the simulated judgments are recorded under")
    p.add_argument("--warm-start", action="store_true", help="retrain by continuing the previous model, not from scratch")
    p.add_argument("--with-clean", action="store_true", help="also train on the clean clusters, to report the gap recovered")
    p.add_argument("--seed", type=int, default=defaults.seed, help="seed of the noise, the training and the simulated annotator")
    p.add_argument("--out", type=Path, default=Path("runs") / "annotation-loop", help="new folder for the run's files")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_loop)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser, argv)
