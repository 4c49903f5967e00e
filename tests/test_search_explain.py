"""Explained search: with `explain: true` every hit says how its score was made (keyword score
from its coverage, BM25's raw score, semantic score from its cosine, the fused score and its
numbered neighbours' lift), and the answer says which legs ran, their candidates and time, and
whether one may have missed entries; without it the answer is as before."""

from __future__ import annotations

import math

import pytest
from rest import UC

from catalog.search.fusion import DEFAULT_WEIGHTS as W
from catalog.search.fusion import keyword_score, semantic_score

STORE = f"{UC}/memory-stores/main.default.explained"
AGENTS = "/api/2.0/agents/memory-stores/explained"

TURNS = {
    "/dialog/1": "did anyone see the platypus by the river",
    "/dialog/2": "yes, swimming near the old bridge at dawn",
    "/dialog/3": "we should bring a camera next time",
    "/notes/tea": "the user drinks green tea every morning",
}


@pytest.fixture(scope="module", autouse=True)
def store(client, token):  # type: ignore[no-untyped-def]
    body = {"name": "explained", "catalog_name": "main", "schema_name": "default"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    for path, text in TURNS.items():
        body = {"path": path, "contents": text}
        if path.startswith("/dialog/"):
            body["session_id"] = "chat"  # a conversation's turns: neighbours of one another
        r = client.post(f"{STORE}/entries", headers=token(), params={"scope": "u"}, json=body)
        assert r.status_code == 200, r.text


def search(client, token, mode: str, explain: bool = True, query: str = "platypus river") -> dict:  # type: ignore[no-untyped-def]
    body = {"scope": "u", "query": query, "mode": mode, "explain": explain}
    r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_hybrid_hits_say_how_their_score_was_made(client, token):
    answer = search(client, token, "hybrid")
    hits = {x["memory_entry"]["path"]: x for x in answer["results"]}
    assert "/dialog/1" in hits
    for hit in answer["results"]:
        d = hit["score_details"]
        assert d["score"] == hit["score"]
        assert math.isclose(d["fused"] + d["neighbour_lift"], d["score"], abs_tol=2e-6), d
        assert math.isclose(d["keyword"], keyword_score(d["coverage"]), abs_tol=2e-6), d
        semantic = semantic_score(d["cosine"]) if "cosine" in d else 0.0
        if "cosine" in d:
            assert math.isclose(d["semantic"], semantic, abs_tol=2e-6), d
        mean = W.semantic_weight * semantic + (1 - W.semantic_weight) * d["keyword"]
        fused = max(mean, W.single * max(semantic, d["keyword"]))  # one leg alone at 0.6 of its score
        assert math.isclose(d["fused"], fused, abs_tol=2e-6), d
    best = hits["/dialog/1"]["score_details"]
    assert best["coverage"] == 1.0 and best["bm25"] > 0 and best["neighbour_lift"] == 0
    # the turn after the question holds none of its words: its score is its neighbour's lift
    after = hits["/dialog/2"]["score_details"]
    assert after["coverage"] == 0 and after["neighbour_lift"] > 0 and "bm25" not in after, after
    assert [(leg["leg"], leg["degraded"]) for leg in answer["explain"]["legs"]] == [
        ("keyword", False),
        ("semantic", False),
    ]
    keyword, semantic = answer["explain"]["legs"]
    assert keyword["candidates"] == 1  # only /dialog/1 holds a query term
    assert semantic["candidates"] == len(TURNS)  # every entry of the scope has a vector
    assert all(leg["ms"] >= 0 for leg in answer["explain"]["legs"]) and answer["explain"]["fusion_ms"] >= 0


def test_a_single_mode_reports_its_own_leg_and_scores(client, token):
    keyword = search(client, token, "keyword")
    assert [leg["leg"] for leg in keyword["explain"]["legs"]] == ["keyword"]
    assert "fusion_ms" not in keyword["explain"]
    (hit,) = keyword["results"]
    assert set(hit["score_details"]) == {"score", "fused", "neighbour_lift", "keyword", "coverage", "bm25"}
    assert hit["score_details"]["score"] == hit["score"] == hit["score_details"]["keyword"]

    semantic = search(client, token, "semantic")
    assert [leg["leg"] for leg in semantic["explain"]["legs"]] == ["semantic"]
    for hit in semantic["results"]:
        d = hit["score_details"]
        assert set(d) == {"score", "fused", "neighbour_lift", "semantic", "cosine"}
        assert d["score"] == hit["score"] and math.isclose(
            d["semantic"], semantic_score(d["cosine"]), abs_tol=2e-6
        )


def test_without_explain_the_answer_is_unchanged(client, token):
    plain = search(client, token, "hybrid", explain=False)
    assert "explain" not in plain and all("score_details" not in x for x in plain["results"])
    explained = search(client, token, "hybrid")
    assert [(x["memory_entry"]["path"], x["score"]) for x in plain["results"]] == [
        (x["memory_entry"]["path"], x["score"]) for x in explained["results"]
    ]


def test_min_score_keeps_its_meaning_with_explain(client, token):
    body = {"scope": "u", "query": "platypus river", "explain": True, "min_score": 0.5}
    r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
    assert r.status_code == 200, r.text
    assert all(x["score_details"]["score"] >= 0.5 for x in r.json()["results"])


def test_the_agent_dialect_explains_too(client, token):
    body = {"actor_id": "u", "query": "platypus river", "explain": True}
    r = client.post(f"{AGENTS}/entries:search", headers=token(), json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["results"] and all(x["score_details"]["score"] == x["score"] for x in answer["results"]), (
        answer
    )
    assert [leg["leg"] for leg in answer["explain"]["legs"]] == ["keyword", "semantic"]
    r = client.post(f"{AGENTS}/entries:search", headers=token(), json={"actor_id": "u", "query": "platypus"})
    assert "explain" not in r.json() and all("score_details" not in x for x in r.json()["results"])


def test_explain_must_be_a_boolean(client, token):
    body = {"scope": "u", "query": "platypus", "explain": "yes"}
    r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
    assert r.status_code == 400 and "explain" in r.text, r.text


def test_a_neighbour_that_was_no_candidate_is_explained_by_its_lift_alone(client, token):
    # more entries holding the query's words than a leg takes: the reply after the question,
    # holding none of them, is lifted by its neighbour without being a candidate of either leg
    entries = [
        {"path": f"/notes/{i}", "contents": f"platypus survey note {i}: counts were low this week"}
        for i in range(70)
    ]
    entries += [
        {"path": "/chat/1", "contents": "platypus river?", "session_id": "talk"},
        {"path": "/chat/2", "contents": "ok", "session_id": "talk"},
    ]
    r = client.post(
        f"{STORE}/entries:batchCreate", headers=token(), params={"scope": "many"}, json={"entries": entries}
    )
    assert r.status_code == 200, r.text
    body = {"scope": "many", "query": "platypus river", "top_k": 10, "explain": True}
    r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    hits = {x["memory_entry"]["path"]: x["score_details"] for x in answer["results"]}
    after = hits["/chat/2"]
    assert after["fused"] == 0 and after["neighbour_lift"] == after["score"] > 0, after
    assert "coverage" not in after and "bm25" not in after and "cosine" not in after, after
