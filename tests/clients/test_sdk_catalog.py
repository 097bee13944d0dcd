"""The SDK and catalog decisions (issue 54): the predict body carries ``candidates``, ``filter`` and
``k`` only when given, and a catalog answer (the top k, no ``probabilities``) reads as a
:class:`Prediction` with its candidates' count and catalog version."""

from __future__ import annotations

from clickboost_client import Prediction
from clickboost_client.sdk import _catalog_fields

ANSWER = {
    "decision_id": "d1",
    "label": "sku-4",
    "label_index": 4,
    "probability": 0.25,
    "ranking": [{"label": "sku-4", "label_index": 4, "probability": 0.25}],
    "candidates": 10000,
    "catalog_version": 7,
    "model": "shop",
    "model_version": 3,
}


def test_predict_body_has_the_catalog_fields_given_only() -> None:
    assert _catalog_fields(None, None, None) == {}
    assert _catalog_fields(("a", "b"), None, 3) == {"candidates": ["a", "b"], "k": 3}
    assert _catalog_fields(None, {"category": ["shoes"]}, None) == {"filter": {"category": ["shoes"]}}


def test_a_catalog_answer_reads_as_a_prediction() -> None:
    p = Prediction.from_json(ANSWER)
    assert p.label == "sku-4" and p.probability == 0.25 and p.probabilities == ()
    assert p.ranking == (("sku-4", 4, 0.25),) and p.candidates == 10000 and p.catalog_version == 7
    q = Prediction.from_json({**ANSWER, "probabilities": [1.0], "ranking": []} | {"candidates": 1})
    assert q.candidates is None and q.probabilities == (1.0,)  # not a catalog answer: as before
