"""Search scores are relevances in [0, 1] that mean the same for every query (catalog/search/
fusion.py): `min_score` at the recommended floor keeps what matches and drops what does not, in
every mode; hybrid search lifts the neighbours of a hit (the short entries written just before and
after it in its scope and session: a dialogue's next turn), whatever their paths."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest
from rest import UC

from catalog.db import create_pool
from catalog.search import repo
from catalog.search.fulltext import FullTextIndex, IndexedEntry
from catalog.search.fusion import (
    DEFAULT_WEIGHTS,
    RECOMMENDED_FLOOR,
    FusionWeights,
    hybrid_score,
    keyword_score,
    lifting,
    ranked,
    semantic_score,
    term_weight,
    with_context,
)
from catalog.search.neighbours import GAP_SECONDS, among, neighbours
from catalog.search.passages import VECTOR, is_short, spans

STORE = f"{UC}/memory-stores/main.default.scores"
MODES = ("hybrid", "keyword", "semantic")

NOTES = {
    "/food/diet.md": "Vegetarian since 2019 and allergic to peanuts and cashews.",
    "/food/coffee.md": "Drinks two espressos every morning, never after lunch.",
    "/travel/trip.md": "Planning a hiking trip to the Dolomites next September.",
    "/home/bike.md": "Commutes by bicycle along the river to the harbour office.",
}


# --- the scoring functions ----------------------------------------------------------------------


def test_semantic_score_is_a_rising_curve_in_zero_one():
    cosines = [-1.0, -0.2, 0.0, 0.15, 0.3, 0.45, 0.6, 0.9, 1.0]
    scores = [semantic_score(c) for c in cosines]
    assert all(0.0 < s < 1.0 for s in scores)
    assert scores == sorted(scores) and len(set(scores)) == len(scores)
    assert semantic_score(DEFAULT_WEIGHTS.cosine_centre) == pytest.approx(0.5)


def test_keyword_score_is_coverage_through_a_concave_power():
    assert keyword_score(0.0) == 0.0 and keyword_score(1.0) == 1.0
    assert keyword_score(0.5) == pytest.approx(0.5**DEFAULT_WEIGHTS.coverage_power)
    assert keyword_score(0.5) > 0.5  # concave: holding half of the weight is more than half a match
    assert keyword_score(-0.1) == 0.0 and keyword_score(1.3) == 1.0


def test_term_weight_falls_as_more_of_the_scope_holds_the_term():
    weights = [term_weight(100, df) for df in (0, 1, 10, 50, 100)]
    assert weights == sorted(weights, reverse=True) and weights[-1] > 0
    assert weights[0] == pytest.approx(math.log(1 + 100.5 / 0.5))


def test_hybrid_score_is_a_weighted_mean_or_one_strong_leg_in_zero_one():
    w = DEFAULT_WEIGHTS
    assert hybrid_score(1.0, 1.0) == pytest.approx(
        w.semantic_weight * semantic_score(1.0) + 1 - w.semantic_weight
    )
    assert 0.0 <= hybrid_score(-1.0, 0.0) < 0.05
    assert hybrid_score(None, 1.0) == pytest.approx(1 - w.semantic_weight)  # no vector yet: semantic 0
    # a strong match of one leg alone is not hidden by the other's silence
    assert hybrid_score(0.6, 0.0) == pytest.approx(w.single * semantic_score(0.6))
    assert hybrid_score(0.6, 0.0) > RECOMMENDED_FLOOR > w.semantic_weight * semantic_score(0.6)
    assert hybrid_score(0.0, 1.0) == pytest.approx(
        max(w.single, 1 - w.semantic_weight + 0.4 * semantic_score(0.0))
    )
    for cos in (-1.0, 0.0, 0.5, 1.0):
        for cov in (0.0, 0.3, 1.0):
            assert 0.0 <= hybrid_score(cos, cov) <= 1.0


def test_context_lifts_neighbours_towards_a_hit_but_never_past_it():
    own = {"hit": 0.9, "near": 0.2, "far": 0.3}
    scores = with_context(own, {"hit": ["near", "new"], "near": ["hit"]})
    assert scores["hit"] == 0.9 and scores["far"] == 0.3  # the hit keeps its score; no neighbour, no change
    assert scores["near"] == pytest.approx(0.2 + 0.8 * (0.9 - 0.2))
    assert scores["new"] == pytest.approx(0.8 * 0.9)  # a neighbour that was no candidate starts from 0
    assert max(scores.values()) == 0.9
    # a better neighbour is not pulled down by a weaker hit, and context 0 changes nothing
    assert with_context({"a": 0.9, "b": 0.1}, {"b": ["a"]})["a"] == 0.9
    assert with_context(own, {"hit": ["near"]}, FusionWeights(context=0.0)) == own


def test_the_neighbours_of_the_candidates_lifting_names_give_the_first_places_exactly():
    """Reading the neighbours of only the candidates `lifting` names ranks the first `needed`
    places as reading every candidate's does: random candidates and neighbour lists, coarse
    scores (ties), neighbours that were no candidates."""
    rng = np.random.default_rng(11)
    fewer = 0
    for _ in range(400):
        n = int(rng.integers(2, 40))
        docs = [f"d{i}" for i in range(n)]
        own = {doc: round(float(rng.random()), 1) for doc in docs}
        pool = [*docs, "x1", "x2", "x3"]
        near = {doc: list(rng.choice(pool, size=int(rng.integers(1, 3)), replace=False)) for doc in docs}
        cosine = {doc: round(float(rng.random()), 1) for doc in docs}
        needed = int(rng.integers(1, n + 2))
        some = lifting(own, needed)
        fewer += len(some) < n
        every = ranked(with_context(own, near), cosine)
        part = ranked(with_context(own, {doc: near[doc] for doc in some}), cosine)
        assert part[:needed] == every[:needed], (needed, own, near)
    assert fewer > 100  # it does leave candidates out
    assert lifting({"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1}, 2) == ["a", "b", "c"]  # ties at the floor stay
    assert lifting({"a": 0.9, "b": 0.5}, None) == ["a", "b"]


def test_neighbours_among_rows_follow_creation_order_within_scope_session_gap_and_length():
    long = " ".join(["word"] * 200)
    rows = [
        ("a", "u", "s", 1_000, "first turn"),
        ("b", "u", "s", 2_000, "the hit"),
        ("c", "u", "s", 3_000, long),  # next, but long: a document of its own
        ("d", "u", "s2", 2_500, "another session"),
        ("e", "v", "s", 2_100, "another scope"),
        ("f", "u", "s", 3_000 + int(GAP_SECONDS * 1000) + 1, "written long after c"),
        ("n1", "u", "", 1_000, "a note"),
        ("n2", "u", "", 1_001, "another note"),
    ]
    assert among(rows, ["b"]) == {"b": ["a"]}
    assert among(rows, ["a"]) == {"a": ["b"]}
    assert among(rows, ["c"]) == {"c": ["b"]}  # c is lifted by nothing; its short neighbour may be
    assert among(rows, ["f"]) == {}  # c is long and far: no neighbour
    assert among(rows, ["n1", "n2"]) == {}  # written without a session: no dialogue


def test_coverage_weighs_terms_by_their_rarity_in_the_searched_scopes(tmp_path):
    index = FullTextIndex(tmp_path / "index")
    entries = [
        IndexedEntry("a", "s", "u1", "", "/a", "Caroline: I researched adoption agencies", ""),
        IndexedEntry("b", "s", "u1", "", "/b", "Caroline: the weather was nice", ""),
        IndexedEntry("c", "s", "u1", "", "/c", "Caroline: pottery class today", ""),
        IndexedEntry("d", "s", "u1", "", "/d", "Melanie: adoption is a big step", "session 2, adoption talk"),
        # another scope full of "adoption": it must not change the weights in u1
        *[IndexedEntry(f"x{i}", "s", "u2", "", f"/x{i}", "adoption adoption", "") for i in range(20)],
    ]
    index.apply([], entries)
    cov = index.coverage("s", ["u1"], "What did Caroline research about adoption?", ["a", "b", "c", "d"])
    assert cov["a"] == pytest.approx(1.0)  # every term (stemmed: researched ~ research)
    assert cov["b"] == pytest.approx(cov["c"])
    assert 0 < cov["b"] < cov["d"] < cov["a"]  # the name is in most of u1: it weighs little there
    # a term the scopes never hold keeps its full weight: nothing covers much of the query
    cov = index.coverage("s", ["u1"], "Caroline adoption zeppelin", ["a"])
    assert cov["a"] < 0.6
    assert index.coverage("s", ["u1"], "the of and", ["a"]) == {"a": 0.0}  # only stopwords: no terms
    index.close()


def test_a_keyword_search_reckons_its_hits_and_other_entries_coverage_as_coverage_does(tmp_path):
    index = FullTextIndex(tmp_path / "index")
    texts = {
        "a": "Caroline: I researched adoption agencies",
        "b": "Caroline: the weather was nice",
        "c": "Melanie: adoption is a big step",
        "d": "Melanie: pottery class today",
        "e": "Caroline: agencies called back about the adoption",
    }
    index.apply([], [IndexedEntry(i, "s", "u1", "", f"/{i}", t, "") for i, t in texts.items()])
    query = "What did Caroline research about adoption agencies?"
    hits, coverage = index.search("s", ["u1"], query, 2)
    found = [doc for doc, _ in hits]
    assert found == ["a", "e"]  # both hold the rarer terms
    assert coverage.of == index.coverage("s", ["u1"], query, found)
    others = [i for i in texts if i not in found]  # what another leg would bring
    assert others and index.more_coverage(coverage, others) == index.coverage("s", ["u1"], query, others)
    # only stopwords: no hit, and no share for anything
    hits, coverage = index.search("s", ["u1"], "the of and", 5)
    assert hits == [] and index.more_coverage(coverage, ["a"]) == {"a": 0.0}
    index.close()


# --- scores through the API ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def notes(client, token):
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={"name": "scores", "catalog_name": "main", "schema_name": "default"},
    )
    assert r.status_code == 200, r.text
    for path, text in NOTES.items():
        r = client.post(
            f"{STORE}/entries",
            headers=token(),
            params={"scope": "alice"},
            json={"path": path, "contents": text},
        )
        assert r.status_code == 200, r.text


def search(client, token, body):
    r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
    assert r.status_code == 200, r.text
    return [(x["memory_entry"]["path"], x["score"]) for x in r.json()["results"]]


def search_keys(client, token, body):
    """[((path, session id or ""), score)], best first."""
    r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
    assert r.status_code == 200, r.text
    return [
        ((x["memory_entry"]["path"], x["memory_entry"].get("session_id") or ""), x["score"])
        for x in r.json()["results"]
    ]


@pytest.mark.parametrize("mode", MODES)
def test_an_exact_match_scores_above_the_floor(client, token, notes, mode):
    hits = search(client, token, {"scope": "alice", "query": NOTES["/travel/trip.md"], "mode": mode})
    assert hits[0][0] == "/travel/trip.md" and hits[0][1] > 0.9
    assert all(0.0 <= score <= 1.0 for _, score in hits)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


@pytest.mark.parametrize("mode", MODES)
def test_a_query_nothing_answers_scores_below_the_floor(client, token, notes, mode):
    query = "quantum chromodynamics lecture notes"
    hits = search(client, token, {"scope": "alice", "query": query, "mode": mode})
    assert all(0.0 <= score < RECOMMENDED_FLOOR for _, score in hits), hits
    body = {"scope": "alice", "query": query, "mode": mode, "min_score": RECOMMENDED_FLOOR}
    assert search(client, token, body) == []


def test_the_floor_keeps_a_partial_match_and_drops_the_rest(client, token, notes):
    body = {"scope": "alice", "query": "peanut allergy and espressos", "min_score": RECOMMENDED_FLOOR}
    paths = [p for p, _ in search(client, token, {**body, "mode": "keyword"})]
    assert paths == []  # each note holds only part of the query
    body = {"scope": "alice", "query": "allergic to peanuts", "min_score": RECOMMENDED_FLOOR}
    for mode in ("hybrid", "keyword"):
        assert [p for p, _ in search(client, token, {**body, "mode": mode})] == ["/food/diet.md"], mode
    # the same text in another user's scope: nothing there answers it
    assert search(client, token, {**body, "scope": "bob"}) == []


def test_hybrid_search_lifts_the_turns_written_next_to_a_hit(client, token, notes):
    turns = {
        "/dialog/D1:8": "Melanie: How was the weekend?",
        "/dialog/D1:9": "Caroline: I finally went to the pottery workshop downtown.",
        "/dialog/D1:10": "Melanie: That sounds lovely, what did you make?",
        "/dialog/D1:11": "Caroline: Just a small bowl, nothing fancy.",
        "/dialog/D2:1": "Melanie: Good morning!",
        "/other": "Melanie: The garden needs watering.",
    }
    for path, text in turns.items():
        r = client.post(
            f"{STORE}/entries",
            headers=token(),
            params={"scope": "dlg"},
            json={"path": path, "contents": text, "session_id": "chat"},
        )
        assert r.status_code == 200, r.text
    # the same numbered path in another session is no neighbour
    r = client.post(
        f"{STORE}/entries",
        headers=token(),
        params={"scope": "dlg"},
        json={"path": "/dialog/D1:10", "session_id": "other", "contents": "Gina: Another chat entirely."},
    )
    assert r.status_code == 200, r.text
    body = {"scope": "dlg", "query": "pottery workshop downtown", "top_k": 20}
    hybrid = search_keys(client, token, {**body, "mode": "hybrid"})
    scores = dict(hybrid)
    assert hybrid[0][0] == ("/dialog/D1:9", "chat")
    hit = scores[("/dialog/D1:9", "chat")]
    lifted = {("/dialog/D1:8", "chat"), ("/dialog/D1:10", "chat")}
    for key in lifted:
        assert hit > scores[key] >= 0.8 * hit - 1e-6, (key, hybrid)
    others = [s for k, s in hybrid if k not in lifted | {("/dialog/D1:9", "chat")}]
    assert ("/dialog/D1:10", "other") in scores and max(others) < 0.5 * hit, hybrid
    # the single modes rank by their one signal: no context
    keyword = search(client, token, {**body, "mode": "keyword"})
    assert [p for p, _ in keyword] == ["/dialog/D1:9"]


def test_neighbours_are_found_by_write_order_not_by_path(client, token, notes):
    lines = [
        ("/notes/a", "Bought milk."),
        ("/x/t12.md", "Descaled the kettle with citric acid."),
        ("/notes/c", "Watered the plants."),
        ("/notes/d", "Paid the rent."),
    ]
    for path, text in lines:
        r = client.post(
            f"{STORE}/entries",
            headers=token(),
            params={"scope": "logs"},
            json={"path": path, "contents": text, "session_id": "day-1"},
        )
        assert r.status_code == 200, r.text
    hits = search(client, token, {"scope": "logs", "query": "descaled kettle citric acid", "top_k": 10})
    scores = dict(hits)
    assert hits[0][0] == "/x/t12.md"
    lifted = {p for p, s in hits if p != "/x/t12.md" and s >= 0.8 * scores["/x/t12.md"] - 1e-6}
    assert lifted == {"/notes/a", "/notes/c"}, hits
    # a path prefix bounds the neighbours too
    hits = search(client, token, {"scope": "logs", "query": "descaled kettle", "path_prefix": "/x/"})
    assert dict(hits).keys() == {"/x/t12.md"}


async def test_the_sql_finds_the_neighbours_the_rule_names(client, token, database_url):
    """`neighbours` (SQL: the entries written just before and after each hit, one index probe
    each) finds what the rule names: same scope and session, written within the gap, short,
    active, within the path prefix."""
    name = f"nb{uuid.uuid4().hex[:8]}"
    body = {"name": name, "catalog_name": "main", "schema_name": "default"}
    assert client.post("/api/2.1/unity-catalog/memory-stores", headers=token(), json=body).status_code == 200
    rows = [  # (path, session, contents, seconds before now, state), in write order
        ("/a", "s", "one", 0, "active"),
        ("/b", "s", "two", 0, "active"),  # the hit
        ("/c", "other", "another session", 0, "active"),
        ("/d", "s", "three", 0, "active"),
        ("/e", "s", " ".join(["long"] * 200), 0, "active"),  # too long to lift
        ("/f", "s", "old", 3 * GAP_SECONDS, "active"),  # written long before its neighbour /g
        ("/g", "s", "four", 0, "active"),
        ("/h", "s", "superseded", 0, "superseded"),
        ("/i", "s", "five", 0, "active"),
        ("/j", "", "a note", 0, "active"),  # no session: no neighbours
        ("/k", "", "another note", 0, "active"),
        ("/l", "t", "a turn", 0, "active"),
        # 96 words of 24 characters: one passage by the rule, though longer than 96 x 24 characters
        ("/m", "t", " ".join(["x" * 24] * 96), 0, "active"),
    ]
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        store_id = str(await pool.fetchval("SELECT id FROM memory_stores WHERE name = $1", name))
        ids = {}
        for path, session, contents, ago, state in rows:
            ids[path] = str(
                await pool.fetchval(
                    # each row held by another embedder for an hour: the server's embedding
                    # worker leaves them alone, so a row has a vector only when the test stores one
                    "INSERT INTO entries (store_id, scope, session_id, path, contents, created_by, "
                    "updated_by, created_at, state, embedding_claim) VALUES ($1, 'u', $2, $3, $4, "
                    "'a', 'a', clock_timestamp() - make_interval(secs => $5), $6, "
                    "clock_timestamp() + interval '1 hour') RETURNING id",
                    store_id,
                    session,
                    path,
                    contents,
                    float(ago),
                    state,
                )
            )
        by_id = {v: k for k, v in ids.items()}

        async def near(path: str, prefix: str | None = None, inactive: bool = False) -> list[str]:
            found = await neighbours(pool, store_id, [ids[path]], prefix, include_inactive=inactive)
            return sorted(by_id[i] for i in found.get(ids[path], []))

        assert await near("/b") == ["/a", "/d"]  # /c: another session
        assert await near("/d") == ["/b"]  # /e is long
        assert await near("/g") == ["/i"]  # /f written long before it; /h superseded, looked past
        assert await near("/g", inactive=True) == ["/h"]
        assert await near("/i") == ["/g"]
        assert await near("/b", prefix="/d") == ["/d"]
        assert await near("/j") == [] and await near("/k") == []
        # short is counted from the text until its vector is stored, then read from the vector's
        # passages (the rule's own count), and from the text again once it changes
        long_words = rows[-1][2]
        assert is_short(long_words) and len(spans(long_words, VECTOR)) == 1
        assert await near("/l") == []  # measured: more than 96 x 24 characters
        unit = np.full(384, 1 / math.sqrt(384), dtype=np.float32)
        await repo.set_embeddings(pool, [(ids["/m"], 1, unit, 1)])
        assert await near("/l") == ["/m"]
        await pool.execute(
            "UPDATE entries SET contents = $2, version = version + 1, "
            "embedding_claim = clock_timestamp() + interval '1 hour' WHERE id = $1",
            ids["/m"],
            " ".join(["long"] * 200),
        )
        assert await near("/l") == []  # its vector is not the current text's: measured again
        await repo.set_embeddings(pool, [(ids["/m"], 2, unit, 3)])
        assert await near("/l") == []  # three passages
    finally:
        await pool.close()
