"""What a bundle carries so that it reads like a model on the Hugging Face Hub: a model card
(``README.md`` with the Hub's front matter) and ``config.json``, both written by ``Bundle.save``
from the manifest, which stays the one file ``load`` reads.

The front matter (``huggingface_hub.ModelCardData``) gives ``library_name: qpr``, tags, the
license and data sets the manifest's ``card`` entry names (``Bundle.with_card``; unset: license
``other``, for the license of the training data applies), and the bundle's measured H@1 and MRR as
a ``model-index``, so the Hub lists them. The text says what the model is for, how to load it, how
it was trained and what it scored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from huggingface_hub import EvalResult, ModelCardData

LIBRARY = "qpr"
TAGS = ("question-paraphrase-retrieval", "sentence-similarity", "sdml", "faiss", "bm25")
UNKNOWN_LICENSE = "other"
# The manifest's metrics, in the order the card shows them, with the names the Hub's model-index gives them.
METRICS = (("H1", "hit_at_1", "H@1"), ("H10", "hit_at_10", "H@10"), ("MRR", "mrr", "MRR"))


def write_card(folder: Path, manifest: Mapping) -> None:
    """Write ``README.md`` (the model card) and ``config.json`` of the bundle described by
    ``manifest`` into ``folder`` (the bundle being written)."""
    (folder / "README.md").write_text(model_card(manifest), encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(config(manifest), indent=2, ensure_ascii=False), encoding="utf-8")


def config(manifest: Mapping) -> dict:
    """What a Hub user looks for in ``config.json``: the system and its layers, the text settings
    and the index (a copy of the manifest's entries, for reading only)."""
    keys = ("system", "format_version", "version", "encoder_config", "text_config", "vocab_rows", "index", "corpus_size")
    return {"library_name": LIBRARY} | {key: manifest[key] for key in keys if key in manifest}


def model_card(manifest: Mapping) -> str:
    """The model card of the bundle ``manifest`` describes: Hub front matter, then the text."""
    card = manifest.get("card", {})
    datasets = list(card.get("datasets", []))
    name = card.get("name") or f"qpr-{manifest.get('system', 'bm25')}-{manifest['version']}"
    data = ModelCardData(library_name=LIBRARY, license=card.get("license", UNKNOWN_LICENSE), tags=list(TAGS),
                         datasets=datasets or None, model_name=name,
                         eval_results=_eval_results(manifest, datasets[0] if datasets else "own-clusters") or None)
    return f"---\n{data.to_yaml()}\n---\n\n" + _text(manifest, name, card)


def _served_metrics(manifest: Mapping) -> tuple[str, dict]:
    if manifest.get("hybrid_metrics"):
        return "the hybrid (encoder + BM25, as served)", manifest["hybrid_metrics"]
    return "the encoder alone", manifest.get("metrics", {})


def _eval_results(manifest: Mapping, dataset: str) -> list[EvalResult]:
    _, metrics = _served_metrics(manifest)
    return [EvalResult(task_type="sentence-similarity", dataset_type=dataset, dataset_name=dataset, dataset_split=split,
                       metric_type=hub, metric_name=shown, metric_value=round(float(scores[key]), 4))
            for split, scores in metrics.items() for key, hub, shown in METRICS if key in scores]


def _text(manifest: Mapping, name: str, card: Mapping) -> str:
    what, metrics = _served_metrics(manifest)
    rows = "\n".join(f"| {split} | {scores.get('queries', '')} | "
                     + " | ".join(f"{scores[key]:.3f}" if key in scores else "" for key, _, _ in METRICS) + " |"
                     for split, scores in metrics.items())
    table = (f"Scored as {what}, each question of a held-out cluster a query with itself removed, top 20:\n\n"
             "| split | queries | H@1 | H@10 | MRR |\n|---|---|---|---|---|\n" + rows) if rows else "No held-out metrics were measured."
    training = manifest.get("training", {})
    settings = training.get("config") or training.get("settings") or {}
    shown = "\n".join(f"- `{key}`: {value}" for key, value in settings.items()) or "- (not recorded in the manifest)"
    credit = f"\n\n## Data\n\n{card['credit']}" if card.get("credit") else ""
    return f"""# {name}

A question paraphrase retriever (after Bonadiman, Kumar & Mittal 2019, *Large Scale Question
Paraphrase Retrieval with Smoothed Deep Metric Learning*): given a question, it returns the known
questions of its corpus ({manifest.get('corpus_size', '?')} here) that mean the same. System
`{manifest.get('system', 'bm25')}`, bundle version `{manifest['version']}`.

## Intended use

Mapping a new wording of a question to the known ones: FAQ answering, deduplicating questions,
routing queries by intent, within the domain of its corpus. It is not a general sentence encoder:
out of that domain, measure it first (docs/OUT_OF_DOMAIN.md of the project).

## Use

```python
from qpr import Retriever

retriever = Retriever.load("OWNER/NAME")  # this repository, or a folder holding these files
retriever.search("how do I reset my password?", k=5)
```

## Results

{table}

## Training

{shown}{credit}
"""
