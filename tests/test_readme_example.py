"""The README's Python example runs as written, against a bundle where it says to train one."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from qpr import Hit, Retriever
from qpr.bundles.training import train_bundle
from qpr.data.corpus import read_cluster_file
from qpr.model.encoder import EncoderConfig
from qpr.training.train import TrainConfig
from workflows.demos import DEMO_CORPUS

ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    section = (ROOT / "README.md").read_text().split("## From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_python_example_runs_as_written(tmp_path, monkeypatch, capsys):
    # What the README says to run first (`qpr train --data workflows/demo_corpus.tsv --out bundles/demo`),
    # with a short training: the example needs a bundle of that corpus, not a good one.
    small = TrainConfig(batch_size=32, max_epochs=2, val_pairs=200)
    train_bundle(read_cluster_file(DEMO_CORPUS), small, encoder_config=EncoderConfig(embedding_dim=16, channels=16, output_dim=16),
                 progress=False).save(tmp_path / "bundles" / "demo")
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(readme_example(), "README.md", "exec"), names)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 4 and printed[-1] == "can I renew my passport online?"  # 3 hits, then the added question
    assert all(isinstance(hit, Hit) for hits in names["batch"] for hit in hits) and len(names["batch"]) == 2
    assert isinstance(names["vectors"], np.ndarray) and names["vectors"].shape == (1, 16)
    grown = Retriever.load(tmp_path / "bundles" / "demo-grown")
    assert len(grown.corpus) == len(Retriever.load(tmp_path / "bundles" / "demo").corpus) + 1
    assert grown.corpus.set_index("qid").loc[names["qids"][0], "cluster"] == "travel-passport-renew"
