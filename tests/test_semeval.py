import numpy as np
import pytest

from qpr.errors import QPRError
from qpr.data.semeval import bm25_scores, engine_scores, load_semeval, pair_auc05, read_semeval, rerank

XML = """<?xml version="1.0" encoding="utf-8"?>
<xml version="x">
<OrgQuestion ORGQ_ID="Q1"><OrgQSubject>good bank</OrgQSubject><OrgQBody>which bank is good in doha</OrgQBody>
 <Thread><RelQuestion RELQ_ID="Q1_R1" RELQ_RANKING_ORDER="1" RELQ_RELEVANCE2ORGQ="Irrelevant">
  <RelQSubject>visa</RelQSubject><RelQBody>how long does a visit visa take</RelQBody></RelQuestion></Thread></OrgQuestion>
<OrgQuestion ORGQ_ID="Q1"><OrgQSubject>good bank</OrgQSubject><OrgQBody>which bank is good in doha</OrgQBody>
 <Thread><RelQuestion RELQ_ID="Q1_R2" RELQ_RANKING_ORDER="2" RELQ_RELEVANCE2ORGQ="PerfectMatch">
  <RelQSubject>best bank</RelQSubject><RelQBody>which is the best bank in doha</RelQBody></RelQuestion></Thread></OrgQuestion>
<OrgQuestion ORGQ_ID="Q1"><OrgQSubject>good bank</OrgQSubject><OrgQBody>which bank is good in doha</OrgQBody>
 <Thread><RelQuestion RELQ_ID="Q1_R3" RELQ_RANKING_ORDER="3" RELQ_RELEVANCE2ORGQ="Relevant">
  <RelQSubject>bank account</RelQSubject><RelQBody/></RelQuestion></Thread></OrgQuestion>
<OrgQuestion ORGQ_ID="Q2"><OrgQSubject>cheap car</OrgQSubject><OrgQBody></OrgQBody>
 <Thread><RelQuestion RELQ_ID="Q2_R1" RELQ_RANKING_ORDER="1" RELQ_RELEVANCE2ORGQ="Irrelevant">
  <RelQSubject>school</RelQSubject><RelQBody>good school for kids</RelQBody></RelQuestion></Thread></OrgQuestion>
<OrgQuestion ORGQ_ID="Q2"><OrgQSubject>cheap car</OrgQSubject><OrgQBody></OrgQBody>
 <Thread><RelQuestion RELQ_ID="Q2_R2" RELQ_RANKING_ORDER="2" RELQ_RELEVANCE2ORGQ="Relevant">
  <RelQSubject>used car</RelQSubject><RelQBody>where to buy a cheap used car</RelQBody></RelQuestion></Thread></OrgQuestion>
</xml>
"""


@pytest.fixture
def frame(tmp_path):
    path = tmp_path / "ql.xml"
    path.write_text(XML)
    return read_semeval(path)


def test_read_joins_subject_and_body_and_labels_relevance(frame):
    assert frame["org_id"].tolist() == ["Q1", "Q1", "Q1", "Q2", "Q2"]
    assert frame["org_text"].iloc[0] == "good bank which bank is good in doha"
    assert frame["rel_text"].iloc[2] == "bank account"  # empty body: subject alone
    assert frame["org_text"].iloc[3] == "cheap car"
    assert frame["relevant"].tolist() == [False, True, True, False, True]


def test_engine_order_and_bm25_by_hand(frame):
    engine = rerank(frame, engine_scores(frame))
    # Q1: relevant at ranks 2, 3 -> AP (1/2 + 2/3)/2, RR 1/2; Q2: relevant at rank 2 -> AP 1/2, RR 1/2.
    assert engine["MAP"] == pytest.approx(((1 / 2 + 2 / 3) / 2 + 1 / 2) / 2)
    assert engine["MRR"] == pytest.approx(0.5)
    assert engine["P@1"] == 0.0
    bm25 = bm25_scores(frame)
    assert bm25[1] > bm25[0] and bm25[4] > bm25[3]  # shared words rank the relevant ones first
    assert rerank(frame, bm25)["P@1"] == 1.0


def test_scores_must_match_the_pairs(frame):
    with pytest.raises(QPRError):
        rerank(frame, np.zeros(3))
    with pytest.raises(QPRError):
        read_semeval(frame.attrs.get("missing", "/nonexistent.xml"))


def test_pair_auc05_of_a_perfect_scorer_is_one(frame):
    assert pair_auc05(frame, frame["relevant"].astype(float).to_numpy()) == pytest.approx(1.0)


@pytest.mark.integration
def test_shared_semeval_engine_baseline_is_the_task_s_published_one(data_dir):
    dev = load_semeval("dev")
    assert dev["org_id"].nunique() == 50 and len(dev) == 500
    engine = rerank(dev, engine_scores(dev))
    # SemEval-2016 Task 3 subtask B, dev, IR baseline: MAP 71.35, MRR 76.67 (queries without a
    # relevant candidate score 0, as the task's scorer counts them).
    assert engine["MAP"] == pytest.approx(0.7135, abs=5e-5)
    assert engine["MRR"] == pytest.approx(0.7667, abs=5e-5)
