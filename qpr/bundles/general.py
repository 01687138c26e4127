"""The "general" bundle: the cold-start model for a corpus that has no clusters yet.

``build_general`` distils all-MiniLM-L6-v2 into the CNN (pooling by max and mean, ``STUDENT``)
on the questions of every shared question set (``qpr.data.sources``; ``qpr.training.distill``), the student's
word embeddings started from MiniLM's vectors of single words (``distilled_student``), then
indexes a corpus with the hybrid scorer fitted across the shared domains (``FUSION``; its comment
cites the measurement that chose it). Without the teacher it trains on the sets' train clusters as
labelled pairs instead (per-source sampling) and fuses by rank (``RANK_FUSION``). ``rebase`` puts a general bundle's
encoder over a user's own corpus (same encoder, new index, same fusion unless the teacher taught
the encoder on it, see ``rebase``): that is the model a new
project serves until its annotators have made clusters to retrain on
(``qpr.bundles.training.retrain_bundle`` continues from it with the settings ``training_info``
records, at ``RETRAIN_LR``).

MiniLM is the teacher only, never served, and comes from the benchmark extra
(``pip install -e '.[bench]'``); without it ``teacher=False`` trains on the labelled
pairs alone. Teacher vectors are cached per set under ``cache`` (they take most of the time), so
a build stopped while the teacher encodes goes on from the last set it finished; with
``progress`` each step says what it does as it starts, the teacher's encoding with a bar.
The bundle records the encoder's results on each set's test clusters (``domain_results``), which
its model card shows (``qpr.bundles.card``).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from qpr.bundles.bundle import Bundle, encode_with
from qpr.training.teacher import TEACHER, minilm_vectors, teacher_model
from qpr.data.corpus import fingerprint
from qpr.training.distill import GeneralConfig, GeneralResult, Unlabelled, train_general, word_student
from qpr.model.encoder import EncoderConfig, QuestionEncoder
from qpr.errors import QPRError
from qpr.evaluation.metrics import evaluate
from qpr.retrieval.asymmetric import choose_weight
from qpr.retrieval.fusion_choice import choose_fusion
from qpr.retrieval.hybrid import Fusion, RankFusion
from qpr.retrieval.index import IndexConfig
from qpr.systems.static import StaticEncoder, static_student
from qpr.data.sources import DOMAINS, EXTRA_QUESTIONS, domain_cap, extra_questions, load_domain
from qpr.model.text import Vocabulary

# The product's hybrid scorer (``qpr.retrieval.hybrid.Fusion``: dense distance, BM25 score and word-overlap
# features, sign-constrained weights fitted to rank each query's candidates, ``fit_rows(per_query=True)``),
# fitted across all seven shared domains, each domain's features from the general encoder of its own
# fold, which never saw that domain: the weights fit how far apart a paraphrase sits for an encoder out
# of its domain. Measured by the ``report`` stage of bench/out_of_domain.py (``fitted_rows``), 2026-11-26
# (commit 05bbc25; 2 CPUs, seed 0, 300 queries per domain): nested (fitted on six domains, measured on
# the seventh's queries) it was the best system over the general encoder, mean H@1 0.686 over the seven
# against 0.668 dense, 0.674 rank fusion and 0.641 BM25, above BM25 on each (+0.023 to +0.105; on
# covid-faq the paired 95% interval reaches below 0) (docs/OUT_OF_DOMAIN.md).
# It reads the distances of a distilled student (unit vectors): a retrained encoder refits its own
# (``qpr.bundles.training``), and a general without a teacher takes ``RANK_FUSION``, which reads ranks only.
FUSION = Fusion(
    mean=(0.9111, 4.771, 0.1351, 0.2671, 0.3022, 0.3192, 0.2477),
    scale=(0.4332, 3.737, 0.09098, 0.1744, 0.2133, 0.2183, 0.1858),
    coef=(-2.382, 0.3419, 0.9242, 0.0, 0.4525, 0.0, 0.0),
    intercept=0.0,
)
# Weighted reciprocal rank fusion, for a general whose distances the scorer above cannot read: the
# setting with the best mean H@1 over the seven left-out domains among dense weights 0 to 1 (by 0.1)
# and k in 0, 2, 5, 20, 60, chosen by the same run (``report`` stage, ``fused_rows``, 2026-11-26):
# dense weight 0.7, k 60 (the dense list counts more, and a rank's weight falls slowly down the lists).
RANK_FUSION = RankFusion(dense_weight=0.7, k=60)
# Every epoch, every question distilled; no labelled pairs: adding the sets' pairs (2,000 per set
# and epoch, cosine SDML) dropped H@1 on left-out domains from about 0.8 to 0.43 on banking77
# (docs/OUT_OF_DOMAIN.md). Without a teacher the sets' labelled pairs are all there is (NO_TEACHER).
# The rate is the one with the lowest distillation loss on the training questions after the 3
# epochs (on two folds: 1e-3, 2e-3, 4e-3, 8e-3), no left-out labels involved; doubling the epochs
# at 1e-3 with a cosine decay instead bought less and doubled the build time (docs/OUT_OF_DOMAIN.md).
BUILD = GeneralConfig(per_source=0, unlabelled_per_epoch=1_000_000, epochs=3, batch_size=256, lr=4e-3)
NO_TEACHER = GeneralConfig(per_source=2000, unlabelled_per_epoch=0, epochs=3, batch_size=256)
# The unlabelled adaptation to a new corpus: one epoch of two word-dropout views of its questions,
# or, with the teacher installed, distillation on them (TEACH: every question, at least three
# epochs and 600 batches of 64: three epochs of 256 were 12 batches on SemEval's 1,054 questions,
# which moved its H@1 0.318 -> 0.381 where 600 batches reach MiniLM's 0.53; docs/OUT_OF_DOMAIN.md).
ADAPT = GeneralConfig(per_source=0, unlabelled_per_epoch=5000, epochs=1, batch_size=256)
# Retraining a general on a project's clusters runs at the paper's SDML rate, not the distillation's:
# on the left-out domains' test clusters, 1e-3 was above 4e-3 on all seven (SQuAD 0.350 -> 0.369,
# banking77 0.898 -> 0.909, SemEval 0.557 -> 0.671; over the max-pool general: above on four,
# level on two, 0.001 below on one); 4e-3 moved the distilled space so far that it left SQuAD and
# Quora-lite below the general they started from (docs/OUT_OF_DOMAIN.md).
RETRAIN_LR = 1e-3
TEACH = GeneralConfig(per_source=0, unlabelled_per_epoch=1_000_000, epochs=3, batch_size=64, min_steps=600)
# The student's layers: the CNN, each window's features pooled by max and by mean (MiniLM pools
# by mean). Against max pooling alone its mean H@1 over the seven left-out domains was higher at
# each of three training seeds (+0.008, +0.012, +0.009), which brought its mean gap to MiniLM
# from 0.056 to 0.046 (docs/OUT_OF_DOMAIN.md).
STUDENT = EncoderConfig(pooling="max+mean")
STUDENTS = ("cnn", "static")  # the CNN above, or the static student of qpr.systems.static


def teacher_words() -> list[str]:
    """The whole words of MiniLM's WordPiece vocabulary (about 22,500, English), in its id order:
    the general student's vocabulary adds them to its training questions' words. QPRError without
    the benchmark extra."""
    # get_vocab() iterates in an order that changes from process to process (a Rust hash map),
    # and the student's token ids, starting rows and word-vector cache follow this list.
    vocab = teacher_model().tokenizer.get_vocab()
    return [w for w in sorted(vocab, key=vocab.get) if w.isalnum() and not w.startswith("##")]


def distilled_student(questions: Sequence[str], cache: Path | None = None, seed: int = 0,
                      encoder_config: EncoderConfig = STUDENT, progress: bool = False) -> tuple[QuestionEncoder, Vocabulary]:
    """A new student of MiniLM (layers of ``encoder_config``) over ``questions``' words and MiniLM's
    own (``qpr.training.distill.word_student``), its embeddings started from MiniLM's vectors of each word
    alone (cached in ``cache`` as ``minilm-words-<hash>.npy``)."""
    def encode(words: list[str]) -> np.ndarray:
        digest = hashlib.sha256("\n".join(words).encode("utf-8")).hexdigest()[:12]
        return minilm_vectors(words, cache / f"minilm-words-{digest}.npy" if cache else None, progress)

    return word_student(questions, teacher_words(), encode, encoder_config=encoder_config, seed=seed)


def general_material(domains: Sequence[str], teacher: bool, cache: Path | None,
                     extra: int = EXTRA_QUESTIONS, progress: bool = False) -> tuple[dict, Unlabelled]:
    """The corpora of ``domains`` (capped, ``qpr.data.sources.domain_cap``) and their questions as
    unlabelled material; with ``teacher``, also up to ``extra`` more questions of each domain
    (``qpr.data.sources.extra_questions``) and MiniLM's vectors of all of them (cached as
    ``cache/minilm-<domain>[-extra]-<fingerprint>.npy``, one file per set as it is done)."""
    sources = {}
    for name in tqdm(domains, desc="reading the question sets", disable=not progress, leave=False):
        sources[name] = load_domain(name, domain_cap(name))
    parts = list(sources.items())
    if teacher and extra:
        for name in tqdm(domains, desc="reading more questions for the teacher", disable=not progress, leave=False):
            if len(more := extra_questions(name, extra)):
                parts.append((f"{name}-extra", more))
    questions = [q for _, frame in parts for q in frame["question"]]
    vectors = None
    if teacher:
        vectors = np.concatenate([
            minilm_vectors(frame["question"].tolist(), cache / f"minilm-{label}-{fingerprint(frame)[:12]}.npy" if cache else None,
                           progress)
            for label, frame in parts])
    return sources, Unlabelled(questions, vectors)


def check_general(bundle: Bundle) -> Bundle:
    """``bundle``, if it can be rebased (a CNN's or a static student's: ``python -m qpr general``
    builds one); QPRError if not."""
    if not isinstance(bundle.encoder, (QuestionEncoder, StaticEncoder)):  # distillation continues one of these
        raise QPRError(f"{bundle.version} is a {bundle.system} bundle: rebase needs a general bundle (python -m qpr general)")
    return bundle


def _tokens(encoder, vocab: Vocabulary | None):
    """What the distillation reads ``encoder``'s token ids with: the CNN's vocabulary, the static student's WordPiece."""
    return encoder.tokenizer if isinstance(encoder, StaticEncoder) else vocab


def _bundle_vocab(encoder, tokens) -> Vocabulary | None:
    """The vocabulary a bundle of ``encoder`` holds: the CNN's; a static student keeps its tokenizer itself."""
    return None if isinstance(encoder, StaticEncoder) else tokens


def rebase(general: Bundle, corpus: pd.DataFrame, adapt: GeneralConfig | None = None, teacher: bool = False, cache: Path | None = None,
           progress: bool = False, asymmetric: bool = False) -> Bundle:
    """``general``'s encoder over ``corpus`` (``qpr.data.corpus.COLUMNS``; clusters may all be <NA>)
    with ``general``'s fusion: the cold-start bundle of a new corpus. ``adapt`` first continues the
    encoder on the corpus's own questions, without labels (None: skip): by self-supervised views,
    or, with ``teacher``, by distillation from MiniLM on them (``TEACH`` is the measured recipe;
    the benchmark extra must be installed; its vectors cached in ``cache``). ``asymmetric`` keeps
    MiniLM's vectors of the corpus beside the encoder's (``Bundle.with_teacher``; the weight chosen
    by ``qpr.retrieval.asymmetric.choose_weight``). A taught or asymmetric encoder gets the fusion
    MiniLM's neighbours choose (``qpr.retrieval.fusion_choice``: the general's, a refit, or none,
    the dense part alone; recorded as ``fusion_choice``). The measurements are in
    docs/OUT_OF_DOMAIN.md."""
    check_general(general)
    model, questions = general, corpus["question"].tolist()
    vectors = (minilm_vectors(questions, cache / f"minilm-corpus-{fingerprint(corpus)[:12]}.npy" if cache else None, progress)
               if asymmetric or (adapt is not None and teacher) else None)
    if adapt is not None:
        model = train_general({}, Unlabelled(questions, vectors if teacher else None), adapt,
                              warm_start=(general.encoder, _tokens(general.encoder, general.vocab)), progress=progress)
    vocab = _bundle_vocab(model.encoder, model.vocab)
    student = encode_with(model.encoder, vocab, questions)
    bundle = Bundle.create(model.encoder, vocab, corpus, IndexConfig("auto"), train_info=general.manifest.training,
                           vectors=student)
    # A version names its encoder's weights; without adaptation that is the general's, so the
    # corpus names it too (two projects' first versions built in the same second stay apart).
    bundle = bundle.with_manifest(version=f"{bundle.version}-{bundle.manifest.data_fingerprint[:8]}",
                                  general={"from": general.version, "adapt": None if adapt is None else asdict(adapt),
                                           "teacher": TEACHER if adapt is not None and teacher else None})
    if asymmetric:
        if progress:
            tqdm.write("rebase: choosing the teacher's weight by its neighbours", file=sys.stderr)
        bundle = bundle.with_teacher(vectors, choose_weight(student, vectors), student)
    carried = general.manifest.fusion or RANK_FUSION.to_dict()
    if vectors is None or carried.get("kind") == "rrf":
        return bundle.with_fusion(carried)
    # Taught on this corpus, or scored against the teacher's vectors, the encoder reads distances
    # the carried scorer was not fitted for: the teacher's neighbours choose it, a refit or the
    # dense part alone (no fusion).
    if progress:
        tqdm.write("rebase: choosing the fusion by the teacher's neighbours", file=sys.stderr)
    choice = choose_fusion(bundle.dense_retriever(), vectors, Fusion.from_stored(general.manifest.fusion))
    bundle = bundle.with_manifest(fusion_choice=choice.to_dict())
    return bundle if choice.fusion is None else bundle.with_fusion(choice.fusion.to_dict())


def training_info(config: GeneralConfig, result: GeneralResult) -> dict:
    """The manifest's ``training`` entry of a general encoder trained by ``config``, with the
    settings that retraining it on a project's clusters (``qpr.bundles.training.retrain_bundle``)
    puts over them (``retrain``): a distilled student's vectors are unit length, so its SDML must
    use the cosine distance, at ``RETRAIN_LR``."""
    distance = "cosine" if result.encoder.config.normalize else "squared"
    return {"kind": "general", "config": asdict(config), "retrain": {"distance": distance, "lr": RETRAIN_LR},
            "history": result.history, "seconds": result.seconds}


def build_general(
    corpus: pd.DataFrame | None = None,
    domains: Sequence[str] = DOMAINS,
    teacher: bool = True,
    cache: Path | None = None,
    config: GeneralConfig | None = None,
    fusion: Fusion | RankFusion | None = None,
    progress: bool = True,
    student: str = "cnn",
) -> Bundle:
    """Train the general encoder on ``domains`` (module doc) and index ``corpus`` with it (default:
    the domains' own questions, so the bundle can be searched at once); ``fusion`` defaults to
    ``FUSION`` with the teacher and ``RANK_FUSION`` without. ``student``: ``"cnn"`` (``STUDENT``) or
    ``"static"`` (``qpr.systems.static``: needs the teacher; rank fusion by default, as ``FUSION``
    was fitted to the CNN's distances)."""
    if student not in STUDENTS:
        raise QPRError(f"unknown student {student!r}; use one of {', '.join(STUDENTS)}")
    if student == "static" and not teacher:
        raise QPRError("the static student is distilled from MiniLM: build it with the teacher (drop --no-teacher)")
    unknown = [d for d in domains if d not in DOMAINS]
    if unknown:
        raise QPRError(f"unknown domain(s) {', '.join(unknown)}; use some of {', '.join(DOMAINS)}")
    if progress:
        tqdm.write(f"general: {len(domains)} question sets" + (", taught by MiniLM (its vectors take most of the time)" if teacher else ""),
                   file=sys.stderr)
    sources, unlabelled = general_material(domains, teacher, cache, progress=progress)
    config = config or (BUILD if teacher else NO_TEACHER)
    start = None
    if student == "static":
        table = static_student(seed=config.seed, cache=cache, progress=progress)
        start = (table, table.tokenizer)
    elif teacher:
        start = distilled_student(unlabelled.questions, cache, config.seed, progress=progress)
    result = train_general(sources, unlabelled, config, warm_start=start, progress=progress)
    if corpus is None:
        frames = [c.assign(cluster=name + ":" + c["cluster"], split="none") for name, c in sources.items()]
        corpus = pd.concat(frames, ignore_index=True).drop_duplicates("question").reset_index(drop=True)
        corpus["qid"] = np.arange(1, len(corpus) + 1, dtype="int64")
    info = training_info(config, result) | {"domains": list(domains), "teacher": TEACHER if teacher else None}
    if progress:
        tqdm.write(f"general: indexing {len(corpus):,} questions", file=sys.stderr)
    bundle = Bundle.create(result.encoder, _bundle_vocab(result.encoder, result.vocab), corpus, IndexConfig("auto"), train_info=info)
    if progress:
        tqdm.write("general: scoring the encoder on each set's test clusters", file=sys.stderr)
    bundle = bundle.with_manifest(domain_metrics=domain_results(bundle, sources))
    return bundle.with_fusion((fusion or (FUSION if teacher and student == "cnn" else RANK_FUSION)).to_dict())


def domain_results(general: Bundle, sources: dict[str, pd.DataFrame]) -> dict:
    """H@1 / H@10 / MRR (``qpr.evaluation.metrics.evaluate``) of ``general``'s encoder on the test
    clusters of each set of ``sources`` (name -> corpus) that has some, each set searched alone
    (its own index): clusters whose labels the encoder never trained on (a teacher saw their
    questions, without labels). How it does on sets it never saw at all is docs/OUT_OF_DOMAIN.md."""
    return {name: {"test": evaluate(Bundle.create(general.encoder, general.vocab, corpus, IndexConfig("auto")).dense_retriever(),
                                    corpus, "test")}
            for name, corpus in sources.items() if (corpus["split"] == "test").any()}
