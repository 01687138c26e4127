"""Inter-annotator agreement over items that two annotators both labelled."""

from __future__ import annotations

import warnings
from itertools import combinations

import pandas as pd
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import cohen_kappa_score

from annotations.models import LABELS
from annotations.store import AnnotationStore

AGREEMENT_COLUMNS = ["annotator_a", "annotator_b", "items", "percent", "cohen_kappa"]


def agreement(store: AnnotationStore) -> pd.DataFrame:
    """Per annotator pair with shared items: how many items both labelled (current labels; an item
    is a query question or typed query plus a candidate), the percentage with the same label, and
    Cohen's kappa over the three labels. Kappa is NaN when it is undefined (both annotators used
    one and the same label throughout, so chance agreement is already 100%)."""
    labels = store.judgments.frame().pivot(index="item_key", columns="annotator", values="label")
    rows = []
    for a, b in combinations(sorted(labels.columns), 2):
        both = labels[[a, b]].dropna()
        if both.empty:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)  # undefined kappa: reported as NaN
            kappa = cohen_kappa_score(both[a], both[b], labels=list(LABELS))
        rows.append({"annotator_a": a, "annotator_b": b, "items": len(both),
                     "percent": 100.0 * float((both[a] == both[b]).mean()), "cohen_kappa": float(kappa)})
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)
