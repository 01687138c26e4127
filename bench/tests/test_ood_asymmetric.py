"""Issue 58's measurement (bench.ood_asymmetric) runs end to end as a CPU dry run on tiny
synthetic domains and its file merges into the results with paired gaps to MiniLM (it may run on
a lent machine once, so it must not fail there for a reason found here); the cold stage drives
the product's own commands on them."""

from __future__ import annotations

import copy
import gzip
import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from bench import ood_asymmetric
from qpr.bundles import general
from qpr.bundles.bundle import Bundle
from qpr.cli import commands
from qpr.cli.main import main
from qpr.data import sources
from qpr.data.sources import DOMAINS
from qpr.training import teacher


def material() -> pd.DataFrame:
    rows = []
    for d, name in enumerate(DOMAINS):
        for i in range(24):  # 8 clusters of 3 paraphrases, and some extra questions
            thing = ("card", "loan", "visa", "tax", "flight", "phone", "exam", "rent")[i // 3]
            text = (f"how do i renew my {thing} {name}", f"renewing a {thing} in {name}?", f"{name}: {thing} renewal steps")[i % 3]
            rows.append((name, "corpus", i + 1, text, f"{name}-{thing}", "test" if name == "quora-lite" else "none"))
        rows += [(name, "extra", 100 + i, f"what is the {name} word number {i}", None, "none") for i in range(6)]
    return pd.DataFrame(rows, columns=["domain", "part", "qid", "question", "cluster", "split"])


def test_a_cpu_dry_run_measures_every_system_and_merges_with_paired_gaps(tmp_path, monkeypatch):
    data = tmp_path / "material.parquet"
    material().to_parquet(data)
    vocab = teacher.teacher_vocabulary()
    rng = np.random.default_rng(0)
    monkeypatch.setattr(teacher, "token_vectors", lambda cache=None, progress=False: rng.normal(size=(len(vocab), 384)).astype(np.float32))
    monkeypatch.setattr(general, "teacher_words", lambda: ["bank", "loan"])  # the CNN's words from MiniLM: a few, at a test's size
    monkeypatch.setattr(ood_asymmetric, "TEACH", replace(general.TEACH, min_steps=0))  # the teaching at a test's size
    out = tmp_path / "run.json"
    ood_asymmetric.run(data, out, "cpu", seeds=[0, 1], domains=["banking77", "covid-faq"], budget=1e9, max_queries=20, epochs=1,
                       students=("cnn-taught", "static", "static-taught", "cnn"))
    measured = json.loads(out.read_text())
    assert not measured["partial"] and set(measured["per_query"]) == {"banking77", "covid-faq"}
    systems = {row["system"] for row in measured["rows"]}
    assert systems == {"bm25", "minilm"} | {f"{student}{kind}" for student in ood_asymmetric.STUDENTS for kind in (
        "", "-rrf", "-asym", "-asym-rrf", *(f"-asym-{w}" for w in ood_asymmetric.WEIGHTS[1:]))}
    assert all(len(hits) == 20 for hits in measured["per_query"]["banking77"].values())
    chosen = measured["weights"]["static:banking77@0"]["chosen"]
    assert {row["weight"] for row in measured["rows"] if row["system"] == "static-asym" and row["left_out"] == "banking77"
            and row["seed"] == 0} == {chosen}

    results, doc = tmp_path / "results.json", tmp_path / "doc.md"
    issue24 = [{"system": "bm25", "left_out": "banking77", "H1": 0.8}, {"system": "hybrid", "left_out": "banking77", "H1": 0.9, "default": True},
               {"system": "minilm", "left_out": "banking77", "H1": 0.95}, {"system": "hybrid", "left_out": "squad", "H1": 0.5, "default": True},
               {"system": "minilm", "left_out": "squad", "H1": 0.45}, {"system": "minilm", "left_out": "covid-faq", "H1": 0.1}]
    results.write_text(json.dumps({"runs": issue24, "bar": {"kept": 1}}))
    doc.write_text("x\n<!-- asym:start -->\nold\n<!-- asym:end -->\n")
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"questions": 700, "static": 6000.0, "cnn": 2000.0, "minilm": 150.0}))
    monkeypatch.setattr(ood_asymmetric, "RESULTS", results)
    monkeypatch.setattr(ood_asymmetric, "DOC", doc)
    ood_asymmetric.merge([out], rates)
    merged = json.loads(results.read_text())
    bar = merged["bar"]
    assert bar["kept"] == 1 and merged["runs"][:6] == issue24  # what was there stays
    assert bar["default_hybrid_minus_minilm"] == 0.0 and not bar["issue58_met"]  # (-0.05 + 0.05) / 2: domains with both
    assert ood_asymmetric.weight_of(bar["best_fast_system"], None) is None  # the weight chosen without labels, or none
    served = bar["best_fast_system"].removesuffix("-rrf") + "-rrf"
    assert bar["minilm_minus_best_fast_hybrid"] == bar["minilm_minus_fast_by_system"][served]
    new = [r for r in merged["runs"] if r.get("issue") == 58]
    assert {(r["left_out"], r["seeds"]) for r in new} == {("banking77", 2), ("covid-faq", 2)} and len(new) == 2 * 32  # 8 systems of each student
    assert all({"system", "left_out", "H1", "seeds", "asymmetric"} <= r.keys() for r in new)
    best = bar["best_fast_system"]
    gaps = [np.mean([np.mean(np.subtract(hits["minilm"], hits[f"{best}@{seed}"])) for hits in measured["per_query"].values()])
            for seed in (0, 1)]
    assert np.isclose(bar["minilm_minus_best_fast"], np.mean(gaps), atol=1e-4)
    assert bar["minilm_minus_best_fast_ci95"][0] <= bar["minilm_minus_best_fast"] <= bar["minilm_minus_best_fast_ci95"][1]
    assert bar["best_fast_encode_over_minilm"] == (40.0 if best.startswith("static") else 13.3) and "old" not in doc.read_text()

    kept = tmp_path / "run.json.gz"  # as the repository keeps a run's file
    kept.write_bytes(gzip.compress(out.read_bytes()))
    ood_asymmetric.merge([kept], rates)
    assert json.loads(results.read_text())["bar"] == bar

    # A second run (another GPU call) adds its systems; where both measured one, the first file's stays.
    more = dict(measured, seeds=[0], per_query={name: {"minilm": hits["minilm"], "bm25": hits["bm25"], "cnn-x@0": hits["minilm"],
                                                       "static@0": [0] * 20} for name, hits in measured["per_query"].items()},
                rows=[{"left_out": name, "system": "cnn-x", "seed": 0, "H1": 1.0, "asymmetric": False}
                      for name in measured["per_query"]])
    second = tmp_path / "run2.json"
    second.write_text(json.dumps(more))
    ood_asymmetric.merge([out, second], rates)
    bar = json.loads(results.read_text())["bar"]
    assert bar["best_fast_system"] == "cnn-x" and bar["minilm_minus_best_fast"] == 0.0 == bar["minilm_minus_best_fast_ci95"][0]
    assert bar["minilm_minus_fast_by_system"]["static"] == round(float(np.mean(
        [np.mean(np.subtract(hits["minilm"], hits[f"static@{seed}"])) for seed in (0, 1) for hits in measured["per_query"].values()])), 4)
    assert bar["best_fast_encode_over_minilm"] == 13.3
    monkeypatch.setattr(ood_asymmetric, "BAR_SEEDS", 2)  # with systems at enough seeds, one seed's figure is shown, never the best
    ood_asymmetric.merge([out, second], rates)
    bar = json.loads(results.read_text())["bar"]
    assert bar["best_fast_system"] == best and bar["minilm_minus_fast_by_system"]["cnn-x"] == 0.0
    # A later call that measured one student at one seed on part of the domains: the domains stay all the
    # first file's, a system measured on fewer is shown but has no mean, and one seed is not the bar's best.
    one_seed = dict(measured, seeds=[5], per_query={"banking77": {"minilm": measured["per_query"]["banking77"]["minilm"],
                                                                  "bm25": measured["per_query"]["banking77"]["bm25"],
                                                                  "cnn-y@5": measured["per_query"]["banking77"]["minilm"]}},
                    rows=[{"left_out": "banking77", "system": "cnn-y", "seed": 5, "H1": 1.0, "asymmetric": False}], partial=True)
    third = tmp_path / "run3.json"
    third.write_text(json.dumps(one_seed))
    ood_asymmetric.merge([out, third], rates)
    merged = json.loads(results.read_text())
    assert merged["bar"]["best_fast_system"] == best and "cnn-y" not in merged["bar"]["minilm_minus_fast_by_system"]
    assert {r["left_out"] for r in merged["runs"] if r.get("system") == "cnn-y"} == {"banking77"}
    assert len({r["left_out"] for r in merged["runs"] if r.get("issue") == 58}) == 2


def test_a_taught_student_never_sees_the_queries_texts_and_needs_its_general(tmp_path, monkeypatch):
    corpus = pd.DataFrame({"qid": [1, 2, 3, 4], "question": ["asked later", "kept a", "also asked later", "kept b"]})
    fold = SimpleNamespace(corpus=corpus, queries=corpus.iloc[[0, 2]], teacher=np.eye(4, dtype=np.float32))
    seen = {}

    def train_general(sources, unlabelled, config, warm_start, progress):
        seen.update(questions=unlabelled.questions, teacher=unlabelled.teacher, config=config, warm_start=warm_start)
        return SimpleNamespace(encoder=SimpleNamespace(eval=lambda: "taught"), vocab="its tokens")

    monkeypatch.setattr(ood_asymmetric, "train_general", train_general)
    assert ood_asymmetric.taught(("encoder", "vocab"), fold, seed=3) == ("taught", "its tokens")
    assert seen["questions"] == ["kept a", "kept b"] and np.array_equal(seen["teacher"], np.eye(4)[[1, 3]])
    assert seen["config"] == replace(general.TEACH, seed=3) and seen["warm_start"] == ("encoder", "vocab")
    for student, needs in (("cnn-taught", "add cnn"), ("static-taught", "add static")):
        with pytest.raises(SystemExit, match=needs):
            ood_asymmetric.run(tmp_path / "none.parquet", tmp_path / "out.json", "cpu", [0], ["banking77"], 1e9, 10, 1,
                               students=(student,))
    assert [ood_asymmetric.student_of(s) for s in ("cnn-taught-asym-0.5", "cnn-asym-rrf", "cnn", "static-taught-rrf", "minilm")] == [
        "cnn-taught", "cnn", "cnn", "static-taught", "minilm"]


def test_the_bars_best_is_a_system_as_served_not_a_weight_picked_on_the_folds():
    systems = ["static", "static-asym", "static-asym-0.25", "static-asym-0.5-rrf", "static-asym-rrf", "cnn-taught-asym-1.0", "cnn-taught"]
    assert ood_asymmetric.bar_candidates(systems) == ["static", "static-asym", "static-asym-rrf", "cnn-taught"]


def test_files_cut_short_are_no_hole_when_others_measured_what_they_left(tmp_path):
    def run_file(name: str, per_query: dict) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({"partial": True, "seeds": [0, 1], "rows": [], "seconds": {}, "per_query": per_query}))
        return path

    seed0 = run_file("a.json", {n: {"minilm": [1], "cnn@0": [1]} for n in DOMAINS})  # stopped before seed 1
    seed1 = run_file("b.json", {n: {"minilm": [1], "cnn@1": [0]} for n in DOMAINS})
    assert not ood_asymmetric.combined([seed0, seed1])["partial"]
    assert ood_asymmetric.combined([seed0])["partial"] is False  # one file that measured one seed everywhere has no hole
    some = run_file("c.json", {n: {"minilm": [1], "cnn@1": [0]} for n in DOMAINS[:3]})
    assert ood_asymmetric.combined([seed0, some])["partial"]  # seed 1 on three domains only
    assert ood_asymmetric.combined([run_file("d.json", {DOMAINS[0]: {"minilm": [1], "cnn@0": [1]}})])["partial"]


def test_the_gaps_interval_covers_the_queries_drawn_as_well_as_the_seeds():
    rng = np.random.default_rng(1)
    minilm = {n: rng.integers(0, 2, size=200).tolist() for n in DOMAINS}
    per_query = {n: {"minilm": minilm[n], "same@0": minilm[n], "same@1": minilm[n],
                     **{f"other@{seed}": rng.integers(0, 2, size=200).tolist() for seed in (0, 1, 2)}} for n in DOMAINS}
    same = ood_asymmetric.paired(per_query, "same")
    assert same["mean"] == 0 and same["ci95"] == [0, 0] == same["ci95_seeds"]  # paired: the same queries for both sides
    other = ood_asymmetric.paired(per_query, "other")
    assert sorted(other["by_seed"]) == [0, 1, 2] and other["mean"] == pytest.approx(np.mean(list(other["by_seed"].values())))
    assert other["ci95"][0] < other["ci95_seeds"][0] <= other["mean"] <= other["ci95_seeds"][1] < other["ci95"][1]
    assert other["ci95"] == ood_asymmetric.paired(per_query, "other")["ci95"]  # the draws are seeded


def test_the_weight_a_system_scores_with_and_the_kept_token_ids():
    assert ood_asymmetric.weight_of("static", 0.5) is None and ood_asymmetric.weight_of("static-rrf", 0.5) is None
    assert ood_asymmetric.weight_of("static-asym", 0.75) == ood_asymmetric.weight_of("static-asym-rrf", 0.75) == 0.75
    assert ood_asymmetric.weight_of("static-asym-0.25", 0.75) == 0.25

    class Counting:
        size, tokens, calls = 3, ["[PAD]", "[UNK]", "a"], 0

        def encode(self, text):
            Counting.calls += 1
            return [2]

    memo = ood_asymmetric.Memo(Counting())
    assert memo.encode_batch(["a", "a", "b"]) == [[2], [2], [2]] and Counting.calls == 2
    assert copy.deepcopy(memo).encode("a") == [2] and Counting.calls == 2  # a copied student shares them


def synthetic(topic: str) -> pd.DataFrame:
    rows = [(f"how do i {verb} my {topic} {thing}", f"{topic}-{thing}")
            for thing in ("card", "account", "loan", "app", "pin", "phone") for verb in ("reset", "change", "fix")]
    return pd.DataFrame({"qid": np.arange(1, len(rows) + 1), "question": [q for q, _ in rows],
                         "cluster": [c for _, c in rows], "split": "none"})


def test_the_cold_stage_runs_the_products_commands_and_asks_the_queries_after_the_rebase(tmp_path, monkeypatch):
    for name in DOMAINS:
        monkeypatch.setitem(sources.LOADERS, name, lambda name=name: synthetic(name))
    rng = np.random.default_rng(0)

    def fake_minilm(texts, cache=None, progress=False):  # a teacher as wide as MiniLM: any unit vectors
        vectors = rng.normal(size=(len(texts), 384))
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)

    monkeypatch.setattr(general, "minilm_vectors", fake_minilm)
    monkeypatch.setattr(general, "teacher_words", lambda: ["bank", "loan"])
    monkeypatch.setattr(commands, "TEACH", replace(general.TEACH, min_steps=0))  # the CLI's --adapt teacher at a test's size
    monkeypatch.setattr(commands, "BUILD", replace(general.BUILD, batch_size=16))
    calls = []

    def in_process(*args):  # the README's commands, run in this process (the synthetic domains are patched here)
        calls.append(args[0])
        assert main([str(a) for a in args]) == 0

    monkeypatch.setattr(ood_asymmetric, "qpr_command", in_process)
    work = tmp_path / "work"
    rows = ood_asymmetric.cold("banking77", ["cnn"], seed=0, max_queries=10, work=work, teacher_cache=tmp_path / "cache")
    assert calls == ["general"] + ["rebase"] * 4
    assert [(r["system"], r["method"]) for r in rows] == [(s, m) for s, _ in ood_asymmetric.REBASES["cnn"] for m in ("served", "dense")]
    assert all(r["queries"] == 10 and 0 <= r["H1"] <= 1 for r in rows)
    assert all((r["weight"] is not None) == r["system"].endswith("-asym") for r in rows)
    assert {r["fusion"] for r in rows} <= {"rrf", "fitted", "none"}
    bare = pd.read_parquet(work / "banking77-without-queries.parquet")
    asked = sources.domain_queries(sources.load_domain("banking77", sources.domain_cap("banking77")), "banking77", 10)
    assert len(bare) == 18 - 10 and bare["cluster"].isna().all() and not set(bare["question"]) & set(asked["question"])
    assert len(Bundle.load(work / "banking77-cnn-asym-seed0").corpus) == 8  # the queries were added to a loaded copy, not saved
    again = ood_asymmetric.cold("banking77", ["cnn"], seed=0, max_queries=10, work=work, teacher_cache=tmp_path / "cache")
    assert len(calls) == 5 and again == rows  # bundles already built are reused, and measure the same

    results, doc = tmp_path / "results.json", tmp_path / "doc.md"
    results.write_text(json.dumps({"runs": [], "bar": {}}))
    doc.write_text("x\n<!-- cold:start -->\nstale\n<!-- cold:end -->\n")
    monkeypatch.setattr(ood_asymmetric, "RESULTS", results)
    monkeypatch.setattr(ood_asymmetric, "DOC", doc)
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"partial": False, "seeds": [0], "rows": [], "seconds": {}, "per_query": {
        "banking77": {"minilm": [1] * 10, "cnn-asym@0": [1, 0] * 5, "cnn-asym-rrf@0": [0] * 10}}}))
    ood_asymmetric.record_cold(rows, [run])
    recorded = {(r["system"], r["method"]): r for r in json.loads(results.read_text())["cold_start"]["rows"]}
    assert recorded["cnn-asym", "dense"]["run_dense_H1"] == 0.5 and recorded["cnn-asym", "served"]["run_rrf_H1"] == 0.0
    assert recorded["cnn", "dense"]["run_dense_H1"] is None and recorded["cnn", "dense"]["minilm_H1"] == 1.0
    assert "stale" not in doc.read_text() and "cnn-taught-asym" in doc.read_text()

    later = [{**row, "left_out": "squad"} for row in rows[:2]] + [{**rows[2], "H1": 0.125}]  # another fold, and one row again
    ood_asymmetric.record_cold(later, [run])
    recorded = json.loads(results.read_text())["cold_start"]["rows"]
    assert len(recorded) == len(rows) + 2 and [r["left_out"] for r in recorded[-2:]] == ["squad", "squad"]
    assert [r["H1"] for r in recorded if (r["left_out"], r["system"], r["method"]) == ("banking77",) + (rows[2]["system"], rows[2]["method"])] == [0.125]
    assert "| squad |" in doc.read_text() and doc.read_text().count("| banking77 |") == len(rows)
    means = {(m["system"], m["method"]): m for m in ood_asymmetric.cold_means(recorded)}
    first = rows[0]["system"], rows[0]["method"]
    assert means[first]["folds"] == 2 and means[first]["H1"] == round((rows[0]["H1"] + rows[0]["H1"]) / 2, 4)
    assert means[first]["run_dense_H1"] is None  # squad has no run figure: no mean over other folds than H@1's
    assert means["cnn-asym", "dense"]["folds"] == 1 and means["cnn-asym", "dense"]["run_dense_H1"] == 0.5
