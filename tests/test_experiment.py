import json

import pytest

from qpr.cli.main import main
from qpr.data.corpus import write_cluster_file
from qpr.errors import QPRError
from qpr.research.experiment import EXPERIMENTS, Arm, arms, run_experiment
from conftest import make_corpus


def test_experiments_cover_the_papers_tables():
    assert [a.epsilon for a in EXPERIMENTS["smoothing"]] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert [a.batch for a in EXPERIMENTS["batch"]] == [32, 64, 128, 256, 512, 1024]
    losses = {(a.loss, a.negatives, a.distance) for a in EXPERIMENTS["loss"]}
    assert len(losses) == 6 and ("sdml", "in-batch", "squared") in losses
    assert {a.noise for a in EXPERIMENTS["noise"]} == {0.0, 0.1, 0.2, 0.4}
    assert {a.batching for a in EXPERIMENTS["noise"]} == {"random", "grouped"}
    assert len(arms("all", [0, 1])) == 2 * sum(len(v) for v in EXPERIMENTS.values())
    with pytest.raises(QPRError, match="unknown experiment"):
        arms("nope", [0])


def test_arms_can_be_selected_by_field():
    clean = arms("noise", [1], {"noise": "0", "batching": "random"})
    assert len(clean) == 3 and {(a.noise, a.seed, a.batching) for a in clean} == {(0.0, 1, "random")}
    assert [a.batching for a in arms("noise", [0], {"noise": "0.4", "loss": "triplet"})] == ["random", "grouped"]
    with pytest.raises(QPRError, match="cannot select arms by 'colour'"):
        arms("noise", [0], {"colour": "red"})
    with pytest.raises(QPRError, match="not a valid float"):
        arms("noise", [0], {"noise": "lots"})
    with pytest.raises(QPRError, match="no arm of 'noise' has loss=SDML"):
        arms("noise", [0], {"loss": "SDML"})


def test_runs_are_written_and_resumable(tmp_path, monkeypatch):
    import qpr.research.experiment as module

    small = {"tiny": [Arm("tiny", batch=16), Arm("tiny", batch=16, noise=0.5)]}
    monkeypatch.setattr(module, "EXPERIMENTS", small)
    results = tmp_path / "results.json"
    corpus = make_corpus()
    rows = run_experiment("tiny", corpus, results, epochs=1, seeds=[0], progress=False, log=lambda _: None)
    assert len(rows) == 4  # 2 arms x (val, test)
    written = json.loads(results.read_text())["runs"]
    assert {(r["noise"], r["split"]) for r in written} == {(0.0, "val"), (0.0, "test"), (0.5, "val"), (0.5, "test")}
    for key in ("experiment", "loss", "distance", "negatives", "epsilon", "batch", "noise", "seed", "split",
                "H1", "H10", "MRR", "epochs", "train_seconds"):
        assert all(key in r for r in written)
    logged = []
    assert run_experiment("tiny", corpus, results, epochs=1, seeds=[0], progress=False, log=logged.append) == []
    assert all(line.startswith("skip (done)") for line in logged)
    forced = run_experiment("tiny", corpus, results, epochs=1, seeds=[0], force=True, progress=False, log=lambda _: None)
    assert len(forced) == 4 and len(json.loads(results.read_text())["runs"]) == 4  # replaced, not duplicated


def test_an_arm_trained_under_another_experiment_is_reused_not_retrained(tmp_path, monkeypatch):
    import qpr.research.experiment as module

    monkeypatch.setattr(module, "EXPERIMENTS", {"first": [Arm("first", batch=16)],
                                                "second": [Arm("second", batch=16), Arm("second", batch=16, noise=0.5)]})
    results = tmp_path / "results.json"
    corpus = make_corpus()
    run_experiment("first", corpus, results, epochs=1, seeds=[0], progress=False, log=lambda _: None)
    logged = []
    rows = run_experiment("second", corpus, results, epochs=1, seeds=[0], progress=False, log=logged.append)
    assert [line.split(":")[0] for line in logged] == ["reuse (first)", "run"]
    written = json.loads(results.read_text())["runs"]
    first, second = ([r for r in written if r["experiment"] == e and r["noise"] == 0.0] for e in ("first", "second"))
    assert len(rows) == 4 and len(second) == 2
    assert [{**r, "experiment": ""} for r in first] == [{**r, "experiment": ""} for r in second]
    # A different epoch budget is a different arm: nothing to reuse.
    logged.clear()
    run_experiment("second", corpus, results, epochs=2, seeds=[0], progress=False, log=logged.append)
    assert all(line.startswith("run") for line in logged)


def test_grouped_arms_batch_by_clean_cluster_and_old_rows_read_as_random(tmp_path, monkeypatch):
    import qpr.research.experiment as module

    seen = []
    real_train = module.train

    def spy(corpus, config, **kwargs):
        seen.append(kwargs.get("batch_groups"))
        return real_train(corpus, config, **kwargs)

    monkeypatch.setattr(module, "train", spy)
    monkeypatch.setattr(module, "EXPERIMENTS", {"tiny": [Arm("tiny", batch=16, noise=0.5, batching="grouped")]})
    corpus = make_corpus()
    run_experiment("tiny", corpus, tmp_path / "r.json", epochs=1, seeds=[0], progress=False, log=lambda _: None)
    assert seen[0].equals(corpus["cluster"])  # the clean clusters, not the noisy copy's
    row = json.loads((tmp_path / "r.json").read_text())["runs"][0]
    assert row["batching"] == "grouped"
    del row["batching"]
    assert module._arm_of(row).batching == "random"


def test_cli_runs_an_experiment_on_a_cluster_file(tmp_path, monkeypatch):
    import qpr.research.experiment as module

    monkeypatch.setattr(module, "EXPERIMENTS", {"tiny": [Arm("tiny", loss="triplet", negatives="hard", epsilon=0.0, batch=16)]})
    data = write_cluster_file(make_corpus(), tmp_path / "c.tsv")
    out = tmp_path / "r.json"
    assert main(["experiment", "tiny", "--data", str(data), "--epochs", "1", "--results", str(out), "--quiet"]) == 0
    assert len(json.loads(out.read_text())["runs"]) == 2
    assert main(["experiment", "tiny", "--data", str(data), "--where", "noise", "--results", str(out)]) == 2


def test_corrupt_results_file_is_not_overwritten(tmp_path):
    results = tmp_path / "r.json"
    results.write_text("{oops")
    with pytest.raises(QPRError, match="not valid JSON"):
        run_experiment("smoothing", make_corpus(), results, epochs=1, seeds=[0], progress=False)
    assert results.read_text() == "{oops"


def test_an_interrupted_arm_stops_the_run_and_records_nothing(tmp_path, monkeypatch):
    import qpr.research.experiment as module

    monkeypatch.setattr(module, "EXPERIMENTS", {"tiny": [Arm("tiny", batch=16), Arm("tiny", batch=16, epsilon=0.1)]})
    real_train = module.train

    def interrupted_train(*args, **kwargs):
        def ctrl_c(row):
            raise KeyboardInterrupt

        return real_train(*args, **kwargs, on_epoch=ctrl_c)

    monkeypatch.setattr(module, "train", interrupted_train)
    results = tmp_path / "r.json"
    with pytest.raises(KeyboardInterrupt):
        run_experiment("tiny", make_corpus(), results, epochs=2, seeds=[0], progress=False, log=lambda _: None)
    assert not results.exists()
