"""``python -m annotations``: export corrected clusters and summarise the annotation database.

Errors a user must fix (bad URL, unreachable database, unknown bundle version, wrong file name)
print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from annotations.agreement import agreement
from annotations.db import open_store
from annotations.export import FORMATS, export, manifest_path
from qpr.cli import run


def cmd_export(args: argparse.Namespace) -> int:
    with open_store(args.db) as store:
        version, corpus = store.corpus(args.bundle_version)
        out = export(store, corpus, args.format, args.out, bundle_version=version)
        manifest = json.loads(manifest_path(out).read_text())
    print(f"{out}: {manifest['questions']} questions, {manifest['clusters_before']} -> {manifest['clusters_after']} "
          f"clusters ({len(manifest['merges'])} merges, {len(manifest['conflicts'])} conflicts for review) from "
          f"{len(manifest['judgment_ids'])} judgments on bundle {version}; manifest {manifest_path(out)}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_store(args.db) as store:
        every = store.judgments(current_only=False)
        summary = {
            "bundle_versions": store.bundle_versions()["version"].tolist(),
            "judgments": {"recorded": len(every), "current": int(every["is_current"].sum())},
            "annotators": {name: store.progress(name) for name in store.annotators()},
            "agreement": agreement(store).to_dict("records"),
        }
    print(json.dumps(summary, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m annotations", description="Annotation database tools.")
    parser.add_argument("--db", help="SQLAlchemy database URL (default: $QPR_DB_URL, else sqlite:///data/annotations.db)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("export", help="write corrected clusters, training pairs and a manifest",
                       description="Merge clusters by the current judgments (see docs/ANNOTATIONS.md) over the corpus "
                       "registered for a bundle version and write it as a cluster file that `python -m qpr train "
                       "--data FILE` reads, plus FILE's .pairs and .manifest.json companions.")
    p.add_argument("--db", default=argparse.SUPPRESS, help="database URL (as above)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--out", required=True, help="cluster file to write; its extension must match --format")
    p.add_argument("--bundle-version", help="whose registered corpus to correct (default: the newest registered)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("stats", help="judgment counts, progress per annotator and agreement as JSON")
    p.add_argument("--db", default=argparse.SUPPRESS, help="database URL (as above)")
    p.set_defaults(func=cmd_stats)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
