"""The commands of ``python -m qpr`` (``qpr.cli.main`` parses the command line and calls one).

Each ``cmd_*`` takes the parsed arguments and returns the exit status; every one calls the same
library functions the app uses. Errors a user must fix raise QPRError, which ``qpr.cli.main.run``
prints as one line (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from qpr.training import distributed
from qpr.bundles.bundle import Bundle, check_target, serving_retriever
from qpr.bundles.hub import load_bundle, push
from qpr.data.corpus import CLUSTER_FORMATS, load_corpus, write_cluster_file
from qpr.errors import QPRError
from qpr.evaluation.metrics import evaluate
from qpr.bundles.general import ADAPT, BUILD, NO_TEACHER, TEACH, build_general, rebase
from qpr.research.experiment import run_experiment
from qpr.retrieval.hybrid import fit_fusion
from qpr.retrieval.index import IndexConfig, check_config
from qpr.data.qalogs import read_log
from qpr.bundles.training import train_system_bundle
from qpr.retrieval.lexical import BM25Retriever
from qpr.systems.registry import DEFAULT, Run, System, system_named, train_options
from qpr.data.supervise import supervise
from qpr.data.supervise_report import write_report
from qpr.model.text import check_text


def train_system(args: argparse.Namespace) -> System:
    """The system ``train`` trains (``--system``, else the one ``--architecture`` implies), once
    no option that the system does not read (``System.options``) was set."""
    implied = "lstm" if args.architecture == "lstm" else DEFAULT
    name = args.system or implied
    if args.architecture != "cnn" and name != implied:
        raise QPRError(f"--architecture {args.architecture} contradicts --system {name}; give one of them")
    system = system_named(name)
    given = [option for option in train_options()
             if option not in system.options and getattr(args, option) != args.option_default(option)]
    if given:
        shown = ", ".join("--" + option.replace("_", "-") for option in given)
        verb = "is not an option" if len(given) == 1 else "are not options"
        raise QPRError(f"{shown} {verb} of --system {name}; leave it out (docs/SEEDS.md lists each system's options)")
    return system


def train_settings(args: argparse.Namespace, system: System) -> Any:
    """``system``'s settings from the options it reads; one not given (``--epochs``, ``--patience``,
    ``--batch-size``, ``--lr``, ``--distance``, ``--base``, ``--pooling``) takes the system's default."""
    options = {name: getattr(args, name) for name in system.options + ("seed",)}
    return system.settings({name: value for name, value in options.items() if value is not None})


def cmd_train(args: argparse.Namespace) -> int:
    # Under torchrun every worker runs this command; they train together (qpr.training.distributed) and
    # worker 0 alone indexes, evaluates and saves the bundle.
    distributed.init_from_env()
    rank = distributed.world()[0]
    # Before hours of training: --out must be a new path or a bundle, in a folder that can be written.
    if rank == 0:
        check_target(args.out)
    system = train_system(args)
    settings = train_settings(args, system)
    corpus = load_corpus(args.data, seed=args.seed)
    check_config(IndexConfig(args.index, args.search), len(corpus))  # likewise the index settings
    if rank > 0:
        if not system.distributed:
            raise QPRError(f"--system {system.name} trains in one process; run it without torchrun")
        system.fit(corpus, settings, Run(progress=False))
        return 0

    def log(row: dict) -> None:  # FILM's iterations (the one system that logs them)
        if not args.quiet and row["iter"] % 10 == 0:
            print(f"FILM iteration {row['iter']}: objective {row['objective']:.5f}", file=sys.stderr)

    run = Run(str(args.data), progress=not args.quiet, log=log)
    bundle = train_system_bundle(corpus, system.name, settings, IndexConfig(args.index, args.search), run)
    print(system.report(bundle.manifest.training), file=sys.stderr)
    return _save_trained(bundle, args.out)


def _save_trained(bundle: Bundle, out: Path) -> int:
    bundle.save(out)
    print(json.dumps({"bundle": str(out), "system": bundle.system, "version": bundle.version, "metrics": bundle.manifest.metrics,
                      "hybrid_metrics": bundle.manifest.hybrid_metrics}, indent=2))
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    bundle = Bundle.load(args.bundle)
    check_config(IndexConfig(args.index, args.search), len(bundle.corpus))  # before encoding the corpus
    bundle = bundle.with_index(IndexConfig(args.index, args.search))
    bundle.save(args.bundle)
    print(f"{args.bundle}: {bundle.index.describe()} over {len(bundle.index)} questions")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    bundle = Bundle.load(args.bundle)
    grown = bundle.with_questions(load_corpus(args.questions), str(args.questions))
    grown.save(args.bundle)
    print(f"{args.bundle}: {len(grown.corpus) - len(bundle.corpus)} questions added, {len(grown.index)} indexed "
          f"({grown.index.describe()}, not rebuilt)")
    return 0


def _retriever(bundle: Bundle, args: argparse.Namespace):
    if args.bm25:
        return bundle.bm25
    return bundle.dense_retriever() if args.dense else serving_retriever(bundle)


def cmd_search(args: argparse.Namespace) -> int:
    for query in args.query:
        check_text(query)  # the shell passes undecodable bytes as lone surrogates
    retriever = _retriever(load_bundle(args.bundle), args)
    for query, hits in zip(args.query, retriever.search(args.query, args.k)):
        if args.json:
            print(json.dumps({"query": query, "hits": [asdict(h) for h in hits]}, ensure_ascii=False))
            continue
        print(f"> {query}")
        for hit in hits:
            print(f"{hit.rank:>3}  {hit.distance:8.3f}  [{hit.cluster or '-'}]  {hit.question}")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    url = push(args.bundle, args.repo, private=args.private)
    print(f"{args.bundle}: pushed to https://huggingface.co/{args.repo} ({url}); load it with "
          f"Retriever.load({args.repo!r}) or `qpr search {args.repo} QUESTION`")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    bundle = Bundle.load(args.bundle)
    corpus = load_corpus(args.data, seed=args.seed) if args.data else bundle.corpus
    if args.data and not args.bm25:
        # Same encoder (and fitted fusion, if any) over another corpus.
        rebuilt = Bundle.create(bundle.encoder, bundle.vocab, corpus, bundle.index.config)
        bundle = rebuilt if bundle.manifest.fusion is None else rebuilt.with_fusion(bundle.manifest.fusion)
    retriever = BM25Retriever(corpus) if args.bm25 else _retriever(bundle, args)
    metrics = evaluate(retriever, corpus, args.split)
    print(json.dumps({"system": retriever.name, "split": args.split} | metrics))
    return 0


def cmd_fuse(args: argparse.Namespace) -> int:
    bundle = Bundle.load(args.bundle)
    fusion = fit_fusion(bundle.dense_retriever(), depth=args.depth, max_queries=args.max_queries)
    bundle = bundle.with_fusion(fusion.to_dict())
    bundle.save(args.bundle)
    weights = dict(zip(fusion.features, (round(c, 3) for c in fusion.coef)))
    print(json.dumps({"bundle": str(args.bundle), "fusion": weights}))
    return 0


def cmd_supervise(args: argparse.Namespace) -> int:
    if args.out.suffix.lower() not in CLUSTER_FORMATS:
        raise QPRError(f"--out {args.out}: unknown file type; use one of {', '.join(CLUSTER_FORMATS)}")
    log = read_log(args.log, args.preset, args.question_col, args.answer_col, args.answer_sep)
    result = supervise(log, args.min_coherence, args.seed, args.multi_answer)
    name = args.preset or args.log.stem
    if args.report:
        write_report(result, args.report, name)
    write_cluster_file(result.corpus, args.out)
    kept = result.clusters["kept"]
    print(f"{name}: {result.counts['questions']} questions, {len(kept)} clusters, {int(kept.sum())} kept "
          f"(coherence >= {args.min_coherence:g}); wrote {args.out}", file=sys.stderr)
    print(json.dumps({"out": str(args.out), "report": str(args.report) if args.report else None} | result.counts
                     | {"clusters": int(len(kept)), "clusters_kept": int(kept.sum())}))
    return 0


def cmd_general(args: argparse.Namespace) -> int:
    check_target(args.out)  # before the teacher and the training
    corpus = load_corpus(args.corpus, seed=args.seed) if args.corpus else None
    config = replace(NO_TEACHER if args.no_teacher else BUILD, epochs=args.epochs, seed=args.seed)
    bundle = build_general(corpus, args.domains, teacher=not args.no_teacher, cache=args.teacher_cache, config=config,
                           progress=not args.quiet, student=args.student)
    bundle.save(args.out)
    run = bundle.manifest.training
    print(json.dumps({"bundle": str(args.out), "version": bundle.version, "questions": len(bundle.corpus),
                      "train_seconds": round(run["seconds"]), "fusion": bundle.manifest.fusion}))
    return 0


def cmd_rebase(args: argparse.Namespace) -> int:
    check_target(args.out)  # before the adaptation
    general = load_bundle(args.general)
    corpus = load_corpus(args.corpus)
    adapt = {"views": ADAPT, "teacher": TEACH, "none": None}[args.adapt]
    bundle = rebase(general, corpus, adapt=adapt, teacher=args.adapt == "teacher", cache=args.teacher_cache,
                    progress=not args.quiet, asymmetric=args.asymmetric)
    bundle.save(args.out)
    print(json.dumps({"bundle": str(args.out), "version": bundle.version, "questions": len(bundle.corpus),
                      "from": general.version, "adapt": args.adapt, "fusion": bundle.manifest.fusion,  # None: the dense part alone
                      "fusion_choice": bundle.manifest.fusion_choice, "asymmetric": bundle.manifest.asymmetric}))
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    corpus = load_corpus(args.data)
    malformed = [condition for condition in args.where if "=" not in condition]
    if malformed:
        raise QPRError(f"--where {malformed[0]!r}: write FIELD=VALUE, e.g. --where noise=0")
    where = dict(condition.partition("=")[::2] for condition in args.where)
    rows = run_experiment(args.name, corpus, args.results, args.epochs, args.seeds, args.force,
                          progress=not args.quiet, where=where)
    print(f"{len(rows)} new result row(s) in {args.results}")
    return 0
