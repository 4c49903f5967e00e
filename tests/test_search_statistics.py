"""No score a principal sees depends on text it may not read: BM25 weighs each query term by its
idf among the entries the search may return (the searched store and scopes), not the whole index
that every store and scope shares. The attack: a principal who may read only scopes `team-a:*`
writes a guessed word and a control word in two entries alike in every other way, and compares
their scores; with statistics of the whole index the guessed word scores lower when other scopes
or stores hold it, which tells that they do."""

from __future__ import annotations

from pathlib import Path

import pytest
from rest import UC

from catalog.search.fulltext import FullTextIndex, IndexedEntry

STORE = "main.default.oracle"
OTHER = "main.default.oracle_other"
GUESS, CONTROL = "zanzibar", "quokka"


def url(store: str) -> str:
    return f"{UC}/memory-stores/{store}"


def write(client, token, store: str, scope: str, path: str, text: str, who: str = "admin") -> None:  # type: ignore[no-untyped-def]
    r = client.post(
        f"{url(store)}/entries",
        headers=token(who),
        params={"scope": scope},
        json={"path": path, "contents": text},
    )
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module", autouse=True)
def stores(client, token):  # type: ignore[no-untyped-def]
    for name in ("oracle", "oracle_other"):
        body = {"name": name, "catalog_name": "main", "schema_name": "default"}
        assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    r = client.patch(
        f"{UC}/permissions/catalog/main",
        headers=token(),
        json={"changes": [{"principal": "eve", "add": ["USE_CATALOG", "USE_SCHEMA"]}]},
    )
    assert r.status_code == 200, r.text
    r = client.patch(
        f"{UC}/permissions/memory_store/{STORE}",
        headers=token(),
        json={
            "changes": [
                {
                    "principal": "eve",
                    "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"],
                    "scopes": ["team-a:*"],
                }
            ]
        },
    )
    assert r.status_code == 200, r.text
    # eve's own scope: background, and the guessed and the control word in entries alike otherwise
    for i in range(6):
        write(
            client, token, STORE, "team-a:eve", f"/n/{i}", f"meeting notes number {i} about the budget", "eve"
        )
    write(client, token, STORE, "team-a:eve", "/g/1", f"trip notes {GUESS} harbour", "eve")
    write(client, token, STORE, "team-a:eve", "/g/2", f"trip notes {CONTROL} harbour", "eve")


def scores(client, token, query: str, mode: str = "keyword") -> dict[str, dict]:  # type: ignore[no-untyped-def]
    body = {"scope": "team-a:eve", "query": query, "mode": mode, "explain": True, "top_k": 20}
    r = client.post(f"{url(STORE)}/entries:search", headers=token("eve"), json=body)
    assert r.status_code == 200, r.text
    return {h["memory_entry"]["path"]: h for h in r.json()["results"]}


def test_a_guessed_word_scores_as_a_control_word_whatever_others_hold(client, token):
    # what eve may not read holds the guessed word many times: another scope, another store
    for i in range(30):
        write(client, token, STORE, "alice", f"/a/{i}", f"alice went to {GUESS} in spring, note {i}")
        write(client, token, OTHER, "bob", f"/b/{i}", f"{GUESS} {GUESS} again for bob, note {i}")
    r = client.post(
        f"{url(STORE)}/entries:search", headers=token("eve"), json={"scope": "alice", "query": GUESS}
    )
    assert r.status_code == 403  # eve reads none of it
    # BM25's length normalization is global (it moves with any text written anywhere, as
    # `FullTextIndex.search` says), and a search of one store waits only for that store's writes:
    # the other store's search waits for its own, so that both searches below see one index
    r = client.post(f"{url(OTHER)}/entries:search", headers=token(), json={"scope": "bob", "query": GUESS})
    assert r.status_code == 200 and len(r.json()["results"]) == 10, r.text

    guess = scores(client, token, f"{GUESS} trip")["/g/1"]["score_details"]
    control = scores(client, token, f"{CONTROL} trip")["/g/2"]["score_details"]
    assert guess["bm25"] == control["bm25"] and guess["coverage"] == control["coverage"], (guess, control)
    # both words in one query: the two entries tie
    both = scores(client, token, f"{GUESS} {CONTROL}")
    assert both["/g/1"]["score"] == both["/g/2"]["score"]
    assert both["/g/1"]["score_details"]["bm25"] == both["/g/2"]["score_details"]["bm25"]
    for mode in ("hybrid", "keyword"):
        hits = scores(client, token, f"{GUESS} {CONTROL}", mode)
        assert hits["/g/1"]["score_details"]["coverage"] == hits["/g/2"]["score_details"]["coverage"]


def test_scores_in_a_scope_do_not_move_when_other_scopes_learn_its_words(client, token):
    query = "budget meeting notes"
    before = scores(client, token, query)
    for i in range(20):
        write(client, token, STORE, "carol", f"/c/{i}", f"budget budget meeting {i}")
        write(client, token, OTHER, "dan", f"/d/{i}", f"notes on the meeting budget {i}")
    after = scores(client, token, query)
    assert {p: h["score"] for p, h in after.items()} == {p: h["score"] for p, h in before.items()}
    assert [h["memory_entry"]["path"] for h in after.values()] == list(before)


def _index(tmp_path: Path, name: str, others: list[str]) -> FullTextIndex:
    """An index holding eve's entries and, in another store and scope, `others`."""
    index = FullTextIndex(tmp_path / name)
    mine = [f"trip notes {GUESS} harbour", f"trip notes {CONTROL} harbour", "budget meeting notes"]
    index.apply(
        [],
        [
            *(IndexedEntry(f"e{i}", "s1", "eve", "", f"/e/{i}", text, "") for i, text in enumerate(mine)),
            *(IndexedEntry(f"o{i}", "s2", "bob", "", f"/o/{i}", text, "") for i, text in enumerate(others)),
        ],
    )
    return index


def test_only_the_length_of_what_others_hold_reaches_a_bm25_score(tmp_path: Path):
    """Two indexes alike but for the words of another store's entries (the same lengths): every
    search in eve's scope answers the same entries with the same BM25 scores. (The length of
    what others hold does reach it: BM25 normalizes by the index's average field length.)"""
    guessed = _index(tmp_path, "guessed", [f"{GUESS} {GUESS} notes trip"] * 40)
    unrelated = _index(tmp_path, "unrelated", ["weather forecast rain tomorrow"] * 40)
    for query in (GUESS, f"{GUESS} trip", f"{GUESS} {CONTROL}", "notes", "budget notes harbour"):
        assert guessed.search("s1", ["eve"], query, 10)[0] == unrelated.search("s1", ["eve"], query, 10)[0]
    # the same guess with statistics of the whole index would have told them apart
    a, b = (dict(i.search("s1", ["eve"], f"{GUESS} {CONTROL}", 10)[0]) for i in (guessed, unrelated))
    assert a["e0"] == a["e1"] and b["e0"] == b["e1"]


def test_counts_cached_before_a_write_never_hide_it(tmp_path: Path):
    """The counts that weigh a query's terms are reused for a while: one taken while the scope
    held nothing (a search before the index caught up) must not hide what is written next."""
    index = FullTextIndex(tmp_path / "cached")
    assert index.search("s1", ["eve"], f"{GUESS} trip", 10)[0] == []  # counts cached: 0 entries, 0 hold it
    index.apply([], [IndexedEntry("e0", "s1", "eve", "", "/e/0", f"trip notes {GUESS}", "")])
    assert [doc for doc, _ in index.search("s1", ["eve"], f"{GUESS} trip", 10)[0]] == ["e0"]


def test_a_scope_count_older_than_a_term_count_never_zeroes_the_keyword_score(tmp_path: Path):
    """The count of the entries a filter admits and the count of those holding a term are each
    reused for a while: one taken before a write and one after must not make a term weigh less
    than nothing (which zeroed every entry's keyword score)."""
    index = FullTextIndex(tmp_path / "stale")
    index.apply([], [IndexedEntry("p", "s1", "u", "", "/p", "prefers email", "")])
    assert index.search("s1", ["u"], "email", 10)[0]  # the scope's count is taken: 1 entry
    index.apply(
        [],
        [
            IndexedEntry("a", "s1", "u", "", "/a", "Going through a divorce.", ""),
            IndexedEntry("b", "s1", "u", "", "/b", "Her divorce lawyer is Ms Patel.", ""),
        ],
    )
    assert index.coverage("s1", ["u"], "the divorce", ["a", "b"]) == {"a": 1.0, "b": 1.0}
