"""BANKING77 (Casanueva et al. 2020, CC BY 4.0): 13,083 real customer questions to an online
bank, each labelled with one of 77 intents; the app's default demo corpus (``workflows.demos``).

``banking77_corpus`` reads ``intents/banking77/{train,test}.csv`` (``text,category``) from the
shared data folder (``QPR_DATA_DIR``), and where that folder lacks them (a fresh Space) the
Hugging Face Hub data set ``PolyAI/banking77`` (its Parquet files, intent names from its card),
fetched once into the Hub cache (offline: ``HF_HUB_OFFLINE=1`` reads only that cache). An intent
is a cluster: questions of one intent are answered alike. Clusters are split 80:10:10 at random
with a fixed seed (``split_clusters``), so val and test are intents the encoder never trains on.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from huggingface_hub import DatasetCard, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError

from qpr.data.corpus import data_dir, split_clusters
from qpr.data.sources import numbered_corpus
from qpr.errors import QPRError, one_line

HUB_DATASET = "PolyAI/banking77"
LICENSE = "cc-by-4.0"
CREDIT = ("Questions: [BANKING77](https://huggingface.co/datasets/PolyAI/banking77) (Casanueva, Temčinas, Gerz, "
          "Henderson & Vulić 2020, *Efficient Intent Detection with Dual Sentence Encoders*, PolyAI), "
          "[CC BY 4.0](https://creativecommons.org/licenses/by/4.0/); intents shown as clusters.")
FILES = ("train.csv", "test.csv")


def banking77_corpus(seed: int = 0) -> pd.DataFrame:
    """The 13,083 questions as a corpus (qid, question, cluster = intent, split), from the data
    folder or else the Hub (module doc); QPRError saying where it looked when neither has them."""
    folder = data_dir() / "intents" / "banking77"
    frame = _local(folder) if all((folder / name).is_file() for name in FILES) else _from_hub(folder)
    return split_clusters(numbered_corpus(frame["text"], frame["category"]), seed)


def _local(folder: Path) -> pd.DataFrame:
    return pd.concat([pd.read_csv(folder / name, dtype=str, keep_default_na=False) for name in FILES], ignore_index=True)


def _from_hub(folder: Path) -> pd.DataFrame:
    try:
        snapshot = Path(snapshot_download(repo_id=HUB_DATASET, repo_type="dataset", allow_patterns=["*.parquet", "README.md"]))
    except (HfHubHTTPError, HFValidationError, LocalEntryNotFoundError, OSError) as err:
        raise QPRError(f"BANKING77 is neither in {folder} (QPR_DATA_DIR) nor fetchable from the Hub data set {HUB_DATASET} "
                       f"({one_line(err)}); set QPR_DATA_DIR, allow network access, or set QPR_DEMO=tutorial") from err
    parts = sorted(snapshot.rglob("*.parquet"))
    if not parts:
        raise QPRError(f"the Hub data set {HUB_DATASET} holds no Parquet files at {snapshot}; set QPR_DATA_DIR to a "
                       "folder with intents/banking77/train.csv and test.csv")
    frame = pd.concat([pd.read_parquet(part) for part in parts], ignore_index=True)
    names = _intent_names(snapshot / "README.md")
    return pd.DataFrame({"text": frame["text"].astype(str),
                         "category": [names.get(int(label), f"intent-{label}") for label in frame["label"]]})


def _intent_names(card: Path) -> dict[int, str]:
    """Label id -> intent name, from the data set card's ``dataset_info`` (empty if it has none)."""
    if not card.is_file():
        return {}
    info = DatasetCard.load(card).data.to_dict().get("dataset_info", {})
    for feature in info.get("features", []) if isinstance(info, dict) else []:
        names = feature.get("dtype", {}).get("class_label", {}).get("names") if isinstance(feature.get("dtype"), dict) else None
        if feature.get("name") == "label" and isinstance(names, dict):
            return {int(key): str(value) for key, value in names.items()}
    return {}
