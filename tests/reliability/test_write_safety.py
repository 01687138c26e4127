"""What a write may replace and what it cleans: ``--out`` refusals, leftovers of dead and live
writers (reused pids included), an interrupted swap finished on open, rollback of file groups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qpr.bundles.bundle import Bundle, check_target
from qpr.errors import QPRError
from qpr.fsutil.atomic import atomic_path
from qpr.fsutil.file_group import atomic_files, recover_files
from qpr.fsutil.leftovers import clean_leftovers, leftovers, recover
from reliability_support import snapshot


def test_a_bundle_replaces_only_a_bundle(tiny_bundle, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("years of work")
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "link").symlink_to(mine)
    impostor = tmp_path / "impostor"
    impostor.mkdir()
    (impostor / "manifest.json").write_text(json.dumps({"format_version": 1, "version": "x"}))
    (impostor / "thesis.pdf").write_text("mine too")
    before = snapshot(tmp_path)
    for target, message in [(mine, "existing folder that is not a bundle"), (tmp_path / "file", "existing file"),
                            (tmp_path / "link", "symbolic link"), (impostor, "not a bundle .*thesis.pdf"),
                            (tmp_path / "file" / "b", "is a file, not a folder")]:
        with pytest.raises(QPRError, match=message):
            tiny_bundle.save(target)
    assert snapshot(tmp_path) == before

    tiny_bundle.save(tmp_path / "new")  # a new path
    tiny_bundle.save(tmp_path / "new")  # an existing bundle
    (tmp_path / "empty").mkdir()
    tiny_bundle.save(tmp_path / "empty")  # an empty folder: nothing to lose
    assert Bundle.load(tmp_path / "empty").version == tiny_bundle.version


def test_an_unwritable_folder_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(QPRError, match="cannot write .*choose a path in a folder you can write"):
        check_target("/proc/no-such-process/bundle")
    with pytest.raises(QPRError, match="cannot create the folder"):
        with atomic_path("/proc/no-such-process/file.txt") as tmp:
            tmp.write_text("x")


def test_a_file_write_refuses_to_replace_a_folder(tmp_path):
    (tmp_path / "out.csv").mkdir()
    with pytest.raises(QPRError, match="existing folder; give a file name"):
        with atomic_path(tmp_path / "out.csv") as tmp:
            tmp.write_text("x")
    assert (tmp_path / "out.csv").is_dir() and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def _leftover(folder: Path, name: str, pid: int, kind: str = "tmp", when: float | None = None) -> Path:
    path = folder / f".{name}.{kind}-{pid}-abcd1234"
    path.mkdir()
    (path / "payload").write_text("x" * 1000)
    if when is not None:
        os.utime(path, (when, when))
    return path


@pytest.fixture
def live_process():
    """A running process that started now: a pid that is alive (and newer than old leftovers)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield child.pid
    child.kill()
    child.wait()


def test_leftovers_of_dead_writers_go_and_live_ones_stay(tmp_path, live_process):
    target = tmp_path / "out.csv"
    target.write_text("data")
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = _leftover(tmp_path, "out.csv", int(finished.stdout))
    own_predecessor = _leftover(tmp_path, "out.csv", os.getpid())  # a past process with our pid (container restart)
    legacy = tmp_path / ".out.csv.tmp-k2j4x9_q"  # the name tempfile gave before pids were in names
    legacy.write_text("old")
    live = _leftover(tmp_path, "out.csv", live_process)
    reused = _leftover(tmp_path, "out.csv", live_process, kind="old", when=time.time() - 3600)  # pid reused since
    unrelated = tmp_path / ".other.tmp-1-abcd1234"
    unrelated.mkdir()

    removed = clean_leftovers(target)
    assert sorted(removed) == sorted([dead, own_predecessor, legacy, reused])
    assert live.exists() and unrelated.exists() and target.read_text() == "data"
    assert [p for p, *_ in leftovers(target)] == [live]


def test_a_bundle_missing_after_a_dead_swap_is_completed_on_open(tiny_bundle, tmp_path):
    tiny_bundle.save(tmp_path / "staged")
    tiny_bundle.save(tmp_path / "aside")
    dead = 999_999_999  # no such pid
    os.rename(tmp_path / "staged", tmp_path / f".b.tmp-{dead}-abcd1234")
    os.rename(tmp_path / "aside", tmp_path / f".b.old-{dead}-abcd1234")
    assert Bundle.load(tmp_path / "b").version == tiny_bundle.version
    assert (tmp_path / f".b.old-{dead}-abcd1234").exists()  # reading repairs, only writing deletes
    tiny_bundle.save(tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_a_swap_whose_new_half_is_gone_rolls_back(tiny_bundle, tmp_path):
    tiny_bundle.save(tmp_path / "aside")
    os.rename(tmp_path / "aside", tmp_path / ".b.old-999999999-abcd1234")
    assert recover(tmp_path / "b") and Bundle.load(tmp_path / "b").version == tiny_bundle.version


def test_a_live_writers_swap_is_left_alone(tmp_path, live_process):
    _leftover(tmp_path, "b", live_process, kind="old")
    assert recover(tmp_path / "b", wait=0) is False  # not ours to finish: it is still running
    assert [kind for _, kind, *_ in leftovers(tmp_path / "b")] == ["old"]


def test_a_file_group_rolls_back_when_its_record_fails(tmp_path):
    targets = [tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "a.csv.manifest.json"]
    for target in targets:
        target.write_text(f"old {target.name}")
    before = snapshot(tmp_path)
    with pytest.raises(RuntimeError, match="database down"):
        with atomic_files(targets) as group:
            for target in targets:
                group.path(target).write_text(f"new {target.name}")
            group.publish({"id": 1})
            assert targets[0].read_text() == "new a.csv"  # published ...
            raise RuntimeError("database down")  # ... but never recorded
    assert snapshot(tmp_path) == before

    with atomic_files(targets) as group:
        for target in targets:
            group.path(target).write_text(f"new {target.name}")
        group.publish({"id": 2})
        group.commit()
    assert [t.read_text() for t in targets] == ["new a.csv", "new b.csv", "new a.csv.manifest.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(t.name for t in targets)


def test_a_dead_publication_is_finished_only_if_it_was_recorded(tmp_path):
    targets = [tmp_path / "a.csv", tmp_path / "a.csv.manifest.json"]
    for recorded, expected in ((False, "old"), (True, "new")):
        for target in targets:
            target.write_text("old")
        stage = tmp_path / ".a.csv.manifest.json.pub-999999999-abcd1234"
        (stage / "new").mkdir(parents=True)
        (stage / "old").mkdir()
        for target in targets:
            (stage / "new" / target.name).write_text("new")
        (stage / "journal.json").write_text(json.dumps({"state": "publishing", "targets": [t.name for t in targets],
                                                        "note": {"id": 7}}))
        # Killed after the old manifest went aside and the new data file went in.
        os.replace(targets[1], stage / "old" / targets[1].name)
        os.replace(targets[0], stage / "old" / targets[0].name)
        os.replace(stage / "new" / targets[0].name, targets[0])
        asked = []
        recover_files(targets[1], committed=lambda note: asked.append(note) or recorded)
        assert asked == [{"id": 7}]
        assert [t.read_text() for t in targets] == [expected, expected]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.csv.manifest.json"]


def test_a_write_cleans_dead_leftovers_of_other_targets_in_its_folder(tiny_bundle, tmp_path, live_process):
    """The app saves every bundle version under a new name: a version killed while saving is
    never written again, so its leftovers must go with the next write beside it."""
    killed = _leftover(tmp_path, "20260101T000000Z-abc", 999_999_999)
    aside = _leftover(tmp_path, "20260102T000000Z-def", 999_999_999, kind="old")  # its swap was interrupted
    live = _leftover(tmp_path, "20260103T000000Z-123", live_process)
    person = tmp_path / ".notes.tmp-backup"  # not our naming: never touched
    person.write_text("mine")
    tiny_bundle.save(tmp_path / "20260104T000000Z-456")
    assert not killed.exists() and not aside.exists() and live.exists() and person.exists()
    assert (tmp_path / "20260102T000000Z-def" / "payload").exists()  # the interrupted swap was finished, not dropped


def test_other_exports_in_the_folder_are_finished_only_where_no_database_is_needed(tmp_path):
    def stage(name: str, state: str | None) -> Path:
        folder = tmp_path / f".{name}.manifest.json.pub-999999999-abcd1234"
        (folder / "new").mkdir(parents=True)
        for target in (name, f"{name}.manifest.json"):
            (folder / "new" / target).write_text("new")
        if state:
            (folder / "journal.json").write_text(json.dumps(
                {"state": state, "targets": [name, f"{name}.manifest.json"], "note": {}}))
        return folder

    committed, publishing, unpublished = stage("a.csv", "committed"), stage("b.csv", "publishing"), stage("c.csv", None)
    with atomic_files([tmp_path / "d.csv", tmp_path / "d.csv.manifest.json"]) as group:
        for target in group.targets:
            group.path(target).write_text("d")
        group.publish()
        group.commit()
    assert (tmp_path / "a.csv.manifest.json").read_text() == "new" and not committed.exists()
    assert publishing.exists() and not (tmp_path / "b.csv").exists()  # only b's own database can tell
    assert not unpublished.exists() and not (tmp_path / "c.csv").exists()
