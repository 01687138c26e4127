"""What a bundle carries so that it reads like a model on the Hugging Face Hub: a model card
(``README.md`` with the Hub's front matter) and ``config.json``, both written by ``Bundle.save``
from the manifest, which stays the one file ``load`` reads.

The front matter (``huggingface_hub.ModelCardData``) gives ``library_name: qpr``, tags, the
license and data sets the manifest's ``card`` entry names (``Bundle.with_card``; unset: license
``other``, for the license of the training data applies), and the bundle's measured H@1 and MRR as
a ``model-index``, so the Hub lists them. The text says what the model is for, how to load it, how
it was trained and what it scored. A general bundle's card (``qpr.bundles.general``) also says
which question sets it was trained on and how, and its results on each set's test clusters
(``domain_metrics``), in the text and in the ``model-index``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from huggingface_hub import EvalResult, ModelCardData

from qpr.bundles.manifest import Manifest

LIBRARY = "qpr"
TAGS = ("question-paraphrase-retrieval", "sentence-similarity", "sdml", "faiss", "bm25")
UNKNOWN_LICENSE = "other"
# The manifest's metrics, in the order the card shows them, with the names the Hub's model-index gives them.
METRICS = (("H1", "hit_at_1", "H@1"), ("H10", "hit_at_10", "H@10"), ("MRR", "mrr", "MRR"))


def write_card(folder: Path, manifest: Manifest) -> None:
    """Write ``README.md`` (the model card) and ``config.json`` of the bundle described by
    ``manifest`` into ``folder`` (the bundle being written)."""
    (folder / "README.md").write_text(model_card(manifest), encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(config(manifest), indent=2, ensure_ascii=False), encoding="utf-8")


def config(manifest: Manifest) -> dict:
    """What a Hub user looks for in ``config.json``: the system and its layers, the text settings
    and the index (a copy of the manifest's entries, for reading only)."""
    keys = ("system", "format_version", "version", "encoder_config", "text_config", "vocab_rows", "index", "corpus_size")
    recorded = manifest.to_json()
    return {"library_name": LIBRARY} | {key: recorded[key] for key in keys if key in recorded}


def model_card(manifest: Manifest) -> str:
    """The model card of the bundle ``manifest`` describes: Hub front matter, then the text."""
    card = manifest.card or {}
    datasets = list(card.get("datasets", []))
    name = card.get("name") or f"qpr-{manifest.system or 'bm25'}-{manifest.version}"
    data = ModelCardData(library_name=LIBRARY, license=card.get("license", UNKNOWN_LICENSE), tags=list(TAGS),
                         datasets=datasets or None, model_name=name,
                         eval_results=(_eval_results(manifest, datasets[0] if datasets else "own-clusters")
                                       + _domain_results(manifest)) or None)
    return f"---\n{data.to_yaml()}\n---\n\n" + _text(manifest, name, card)


def _served_metrics(manifest: Manifest) -> tuple[str, dict]:
    if manifest.hybrid_metrics:
        return "the hybrid (encoder + BM25, as served)", manifest.hybrid_metrics
    return "the encoder alone", manifest.metrics


def _eval_results(manifest: Manifest, dataset: str) -> list[EvalResult]:
    _, metrics = _served_metrics(manifest)
    return [EvalResult(task_type="sentence-similarity", dataset_type=dataset, dataset_name=dataset, dataset_split=split,
                       metric_type=hub, metric_name=shown, metric_value=round(float(scores[key]), 4))
            for split, scores in metrics.items() for key, hub, shown in METRICS if key in scores]


def _domain_results(manifest: Manifest) -> list[EvalResult]:
    return [EvalResult(task_type="sentence-similarity", dataset_type=domain, dataset_name=domain, dataset_split=split,
                       metric_type=hub, metric_name=shown, metric_value=round(float(scores[key]), 4))
            for domain, splits in (manifest.domain_metrics or {}).items() for split, scores in splits.items()
            for key, hub, shown in METRICS if key in scores]


def _rows(metrics: Mapping) -> str:
    """Markdown table rows of ``metrics`` (row name -> scores), one per row, the columns of ``METRICS``."""
    return "\n".join(f"| {row} | {scores.get('queries', '')} | "
                     + " | ".join(f"{scores[key]:.3f}" if key in scores else "" for key, _, _ in METRICS) + " |"
                     for row, scores in metrics.items())


def _trained_on(manifest: Manifest) -> str:
    """A general bundle's section on what it was trained on and how it scored on each set; "" for others."""
    training = manifest.training
    if training.get("kind") != "general":
        return ""
    teacher = training.get("teacher")
    how = (f"distilled from {teacher} on their questions (no labels)" if teacher
           else "on their train clusters as labelled pairs (no teacher)")
    rows = _rows({domain: splits["test"] for domain, splits in (manifest.domain_metrics or {}).items() if "test" in splits})
    table = ("Scored as the encoder alone on each set's test clusters (labels it never trained on), each set searched "
             "alone, top 20:\n\n| set | queries | H@1 | H@10 | MRR |\n|---|---|---|---|---|\n" + rows) if rows else (
             "Its results per set were not recorded in this bundle.")
    return f"""

## Trained on

A general bundle (`qpr general`), the cold start of new projects (`QPR_GENERAL`, `qpr rebase`):
trained on the question sets {", ".join(f"`{domain}`" for domain in training.get("domains", []))}, {how}.
How it does on a set it never saw at all is measured in docs/OUT_OF_DOMAIN.md of the project.

{table}"""


def _text(manifest: Manifest, name: str, card: Mapping) -> str:
    what, metrics = _served_metrics(manifest)
    rows = _rows(metrics)
    table = (f"Scored as {what}, each question of a held-out cluster a query with itself removed, top 20:\n\n"
             "| split | queries | H@1 | H@10 | MRR |\n|---|---|---|---|---|\n" + rows) if rows else "No held-out metrics were measured."
    training = manifest.training
    settings = training.get("config") or training.get("settings") or {}
    shown = "\n".join(f"- `{key}`: {value}" for key, value in settings.items()) or "- (not recorded in the manifest)"
    credit = f"\n\n## Data\n\n{card['credit']}" if card.get("credit") else ""
    return f"""# {name}

A question paraphrase retriever (after Bonadiman, Kumar & Mittal 2019, *Large Scale Question
Paraphrase Retrieval with Smoothed Deep Metric Learning*): given a question, it returns the known
questions of its corpus ({'?' if manifest.corpus_size is None else manifest.corpus_size} here) that mean the same. System
`{manifest.system or 'bm25'}`, bundle version `{manifest.version}`.

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

{table}{_trained_on(manifest)}

## Training

{shown}{credit}
"""
