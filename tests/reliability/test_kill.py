"""kill -9 at chosen points of a training save, a bundle swap, an export and a batch of judgments.

After each kill: the last good bundle (or the new one, where the swap had committed) loads, no
export is visible whose files do not match its manifest, the database records no export whose
files are not in place once recovered, and no judgment is lost or half-written. The next write
removes what the dead process left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from annotations.db import open_store
from annotations.errors import AnnotationError
from annotations.export import check_export, export, manifest_path, recover_export
from conftest import make_corpus
from harness.killed_child import run_until_killed
from qpr.bundles.bundle import Bundle
from qpr.data.corpus import write_cluster_file
from qpr.fsutil.leftovers import leftovers

VERSION = "v1"

# A child that rewrites a bundle (``python -m qpr index`` or ``train``) and pauses at POINT.
BUNDLE_WRITER = """
import qpr.retrieval.index
from qpr.cli.main import main
point, argv = sys.argv[1], sys.argv[2:]
real_rename, real_save = os.rename, qpr.retrieval.index.VectorIndex.save

def rename(src, dst, *args, **kwargs):
    real_rename(src, dst, *args, **kwargs)
    if point == "old-aside" and ".old-" in Path(dst).name:
        pause(point)  # the old bundle is aside, the new one not yet in: no directory at the path
    if point == "new-in" and ".tmp-" in Path(src).name and Path(dst).name == Path(argv[1] if argv[0] != "train" else argv[argv.index("--out") + 1]).name:
        pause(point)  # the new bundle is in, the old one not yet deleted

def save(self, path):
    real_save(self, path)
    if point == "writing":
        pause(point)  # half of the new bundle is written beside the old one

os.rename, qpr.retrieval.index.VectorIndex.save = rename, save
main(argv)
"""


def bundle_leftovers(path: Path) -> list[str]:
    return [p.name for p, *_ in leftovers(path)]


@pytest.fixture
def good(tiny_bundle, tmp_path):
    """A folder holding one good bundle ``b``."""
    tiny_bundle.save(tmp_path / "b")
    return tmp_path / "b"


def test_kill_during_a_training_save_keeps_the_last_good_bundle(good, tiny_bundle, tmp_path):
    data = write_cluster_file(make_corpus(), tmp_path / "clusters.jsonl")
    pid, _, _ = run_until_killed(BUNDLE_WRITER, [
        "writing", "train", "--data", str(data), "--out", str(good), "--epochs", "1", "--batch-size", "16",
        "--vocab-size", "500", "--hash-bins", "100", "--quiet"], tmp_path / "marker")
    assert Bundle.load(good).version == tiny_bundle.version
    assert [name.startswith(f".b.tmp-{pid}-") for name in bundle_leftovers(good)] == [True]  # the half-written bundle
    tiny_bundle.save(good)  # the next write removes it
    assert bundle_leftovers(good) == [] and Bundle.load(good).version == tiny_bundle.version


@pytest.mark.parametrize("point, served_after", [("writing", "old"), ("old-aside", "new"), ("new-in", "new")])
def test_kill_at_any_step_of_a_bundle_swap_leaves_a_complete_bundle(good, tiny_bundle, tmp_path, point, served_after):
    pid, reached, _ = run_until_killed(BUNDLE_WRITER, [point, "index", str(good), "--index", "HNSW8", "--search", "efSearch=3"],
                                       tmp_path / "marker")
    assert reached == point
    if point == "old-aside":
        assert not good.exists()  # the kill landed between the two renames
    restarted = Bundle.load(good)  # what a restarting app does
    assert restarted.index.describe() == ("HNSW8/efSearch=3" if served_after == "new" else tiny_bundle.index.describe())
    assert good.is_dir() and restarted.version == tiny_bundle.version  # same encoder, other index settings
    Bundle.load(good).save(good)  # the next write cleans up after the dead process
    assert bundle_leftovers(good) == []
    assert sorted(p.name for p in good.parent.iterdir()) == ["b", "marker"]


# A child that exports corrected clusters to OUT and pauses at POINT.
EXPORTER = """
import qpr.fsutil.file_group
from annotations.db import open_store
from annotations.export import export
point, url, out = sys.argv[1:]
real_replace, real_publish, real_commit = os.replace, qpr.fsutil.file_group.FileGroup.publish, qpr.fsutil.file_group.FileGroup.commit

def replace(src, dst, *args, **kwargs):
    real_replace(src, dst, *args, **kwargs)
    if point == "cluster-placed" and Path(dst) == Path(out) and "/new/" in str(src):
        pause(point)  # new cluster file beside the old pairs file; old manifest moved aside

def publish(self, note=None):
    real_publish(self, note)
    if point == "published":
        pause(point)  # every file in place, database row written but not committed

def commit(self):
    if point == "recorded":
        pause(point)  # database row committed, the publication not yet marked committed
    real_commit(self)

os.replace, qpr.fsutil.file_group.FileGroup.publish, qpr.fsutil.file_group.FileGroup.commit = replace, publish, commit
store = open_store(url, project="demo")
version, corpus = store.corpora.snapshot("v1")
export(store, corpus, "csv", out, bundle_version=version)
"""


def exports_recorded(store) -> list[tuple[int, str]]:
    with store.engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text("SELECT id, path FROM exports ORDER BY id"))]


@pytest.mark.parametrize("point, recovered_to", [("cluster-placed", "old"), ("published", "old"), ("recorded", "new")])
def test_kill_during_an_export_shows_no_partial_export(tmp_path, point, recovered_to):
    url, out, corpus = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "corrected.csv", make_corpus()
    with open_store(url, project="demo") as store:
        store.corpora.register(VERSION, corpus)
        store.judgments.record("ann", 2, "same", VERSION, query_qid=1)
        first = check_export(export(store, corpus, "csv", out, bundle_version=VERSION))
        store.judgments.record("ann", 7, "same", VERSION, query_qid=6)  # the second export differs from the first

    run_until_killed(EXPORTER, [point, url, str(out)], tmp_path / "marker")

    with open_store(url, project="demo") as store:
        # Right after the kill: a manifest is only ever beside the files it describes.
        if manifest_path(out).exists():
            check_export(out)
        else:
            with pytest.raises(AnnotationError, match="no complete export"):
                check_export(out)
        assert len(exports_recorded(store)) == (2 if recovered_to == "new" else 1)

        assert len(recover_export(store, out)) == 1  # what the next export does first
        after = check_export(out)
        recorded = exports_recorded(store)
        assert (after["export_id"], str(out.resolve())) == recorded[-1]  # the visible export is the recorded one
        if recovered_to == "old":
            assert after == first and len(recorded) == 1
        else:
            assert after["export_id"] == first["export_id"] + 1 and len(after["judgment_ids"]) == 2
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the staging folder is gone
        again = check_export(export(store, corpus, "csv", out, bundle_version=VERSION))  # and exporting works on
        assert (again["export_id"], str(out.resolve())) == exports_recorded(store)[-1]


# A child that records a batch of judgments, printing each id once recorded, and pauses inside
# the transaction of judgment number STOP (a re-judgment: it supersedes an earlier label).
WRITER = """
from sqlalchemy.orm import SessionTransaction
from annotations.db import open_store
url, stop = sys.argv[1], int(sys.argv[2])
state = {"item": -1}
real_commit = SessionTransaction.commit

def commit(self, *args, **kwargs):
    if state["item"] == stop:
        pause("mid-transaction")  # every row of this judgment flushed, nothing committed
    return real_commit(self, *args, **kwargs)

SessionTransaction.commit = commit
store = open_store(url, project="demo")
items = [(1, c) for c in range(2, 6)] + [(1, 3), (1, 4), (6, 7), (1, 3)]
for number, (query, candidate) in enumerate(items):
    state["item"] = number
    label = ("same", "different", "unsure")[number % 3]
    print(store.judgments.record("ann", candidate, label, "v1", query_qid=query), flush=True)
"""


def test_kill_of_a_writer_mid_batch_loses_no_judgment_and_half_writes_none(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_store(url, project="demo") as store:
        store.corpora.register(VERSION, make_corpus())
    stop = 5  # the re-judgment of (1, 4)
    _, _, output = run_until_killed(WRITER, [url, str(stop)], tmp_path / "marker")
    recorded = [int(line) for line in output.split() if line.isdigit()]
    assert len(recorded) == stop

    with open_store(url, project="demo") as store:
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        history = store.judgments.frame(current_only=False)
        assert history["id"].tolist() == recorded  # every returned id is there, the killed one is not
        current = store.judgments.frame()
        assert not current.duplicated("item_key").any()
        assert set(current["item_key"]) == {f"qid:1:{c}" for c in range(2, 6)}  # (1, 4) keeps its first label
        assert history.loc[history["item_key"] == "qid:1:4", "is_current"].tolist() == [True]
        assert history["superseded_by"].dropna().tolist() == [recorded[4]]  # only the completed re-judgment
        store.judgments.record("ann", 4, "same", VERSION, query_qid=1)  # the dead writer's lock is gone
        assert len(store.judgments.frame(current_only=False)) == stop + 1
