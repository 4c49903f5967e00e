"""Search quality with the real ONNX model on a small fixed memory set: hybrid search must not
fall below either single mode. Some questions are paraphrases (no shared words: only the vectors
find them), some hinge on a rare exact term (names, codes: BM25 finds them best)."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient
from rest import UC

from catalog.app import create_app

STORE = f"{UC}/memory-stores/main.default.quality"

MEMORIES = {
    "/prefs/contact.md": "Prefers to be reached by email; dislikes phone calls during work hours.",
    "/prefs/tone.md": "Wants short, direct answers without small talk.",
    "/health/diet.md": "Vegetarian since 2019 and allergic to peanuts and cashews.",
    "/health/sleep.md": "Usually goes to bed around midnight and wakes up at seven.",
    "/work/role.md": "Works as a backend engineer on the payments team.",
    "/work/stack.md": "The payments service is written in Go and deployed on Kubernetes.",
    "/work/ticket.md": "Ticket PAY-4821 tracks the refund rounding bug found in March.",
    "/work/manager.md": "Reports to Ingrid Halvorsen, the engineering director.",
    "/family/kids.md": "Has two daughters, Mila (8) and Ada (5), who both take piano lessons.",
    "/family/pet.md": "Owns a greyhound called Biscuit adopted from a rescue shelter.",
    "/travel/trip.md": "Planning a hiking trip to the Dolomites next September.",
    "/travel/fear.md": "Gets anxious on long flights and prefers trains in Europe.",
    "/hobby/music.md": "Plays bass guitar in a weekend jazz trio.",
    "/hobby/reading.md": "Currently reading a history of the Byzantine empire.",
    "/finance/budget.md": "Saving for a flat; keeps monthly spending under 2,000 euros.",
    "/home/city.md": "Lives in Rotterdam near the old harbour.",
    "/home/car.md": "Does not own a car and commutes by bicycle.",
    "/learning/lang.md": "Learning Japanese with a tutor twice a week.",
}

QUESTIONS = [
    ("how does the user like to be contacted", "/prefs/contact.md"),  # paraphrase
    ("what foods must be avoided", "/health/diet.md"),
    ("what musical instrument does the user play", "/hobby/music.md"),
    ("does the user have any animals", "/family/pet.md"),
    ("how does the user get to the office", "/home/car.md"),
    ("who is the user's boss", "/work/manager.md"),
    ("what is the status of PAY-4821", "/work/ticket.md"),  # rare exact terms
    ("Biscuit", "/family/pet.md"),
    ("Dolomites plans", "/travel/trip.md"),
    ("Ingrid Halvorsen", "/work/manager.md"),
    ("Byzantine", "/hobby/reading.md"),
    ("Rotterdam harbour", "/home/city.md"),
    ("which programming language is the payments service built with", "/work/stack.md"),
    ("nervous about flying", "/travel/fear.md"),
]


@pytest.fixture(scope="module")
def real_client(settings):
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:  # the real ONNX model
        yield client


def test_hybrid_is_at_least_as_good_as_either_mode(real_client, token):
    c = real_client
    assert (
        c.post(
            f"{UC}/memory-stores",
            headers=token(),
            json={"name": "quality", "catalog_name": "main", "schema_name": "default"},
        ).status_code
        == 200
    )
    for path, text in MEMORIES.items():
        r = c.post(
            f"{STORE}/entries",
            headers=token(),
            params={"scope": "user-7"},
            json={"path": path, "contents": text},
        )
        assert r.status_code == 200, r.text

    def reciprocal_ranks(mode: str) -> list[float]:
        ranks = []
        for question, wanted in QUESTIONS:
            r = c.post(
                f"{STORE}/entries:search",
                headers=token(),
                json={"scope": "user-7", "query": question, "mode": mode, "top_k": 5},
            )
            paths = [x["memory_entry"]["path"] for x in r.json()["results"]]
            ranks.append(1 / (paths.index(wanted) + 1) if wanted in paths else 0.0)
        return ranks

    scores = {mode: reciprocal_ranks(mode) for mode in ("keyword", "semantic", "hybrid")}
    mrr = {mode: sum(v) / len(v) for mode, v in scores.items()}
    hits = {mode: sum(1 for x in v if x == 1.0) for mode, v in scores.items()}
    assert mrr["hybrid"] >= max(mrr["keyword"], mrr["semantic"]), mrr
    assert hits["hybrid"] >= max(hits["keyword"], hits["semantic"]), hits
    assert hits["hybrid"] >= len(QUESTIONS) - 2, (hits, scores)
    # the seed flow of the docs, word for word, with the real model
    r = c.post(
        f"{STORE}/entries",
        headers=token(),
        params={"scope": "user-123"},
        json={
            "path": "/memories/preferences.md",
            "contents": "Prefers email over phone calls. Likes concise answers.",
            "description": "Communication preferences",
        },
    )
    assert r.status_code == 200
    for other in ("/memories/travel.md", "/memories/food.md"):
        r = c.post(
            f"{STORE}/entries",
            headers=token(),
            params={"scope": "user-123"},
            json={
                "path": other,
                "contents": MEMORIES["/travel/fear.md" if "travel" in other else "/health/diet.md"],
            },
        )
        assert r.status_code == 200, r.text
    r = c.post(
        f"{STORE}/entries:search",
        headers=token(),
        json={"scope": "user-123", "query": "communication preferences"},
    )
    assert r.json()["results"][0]["memory_entry"]["path"] == "/memories/preferences.md"
