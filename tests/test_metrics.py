"""`GET /metrics`: Prometheus text, a token and READ_AUDIT on the metastore needed, audited, and
the full-text index's lag and failures as they happen."""

from __future__ import annotations

import time

from catalog.search.fulltext import FullTextIndex

UC = "/api/2.1/unity-catalog"
AUDIT = f"{UC}/system/audit"
STORE = f"{UC}/memory-stores/main.default.met"


def parse(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split(" ")
            values[name] = float(value)
    return values


def metrics(client, token) -> dict[str, float]:  # type: ignore[no-untyped-def]
    r = client.get("/metrics", headers=token())
    assert r.status_code == 200, r.text
    return parse(r.text)


def wait_for(predicate, what: str, within: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)
    return value


def test_metrics_need_a_token_and_read_audit_and_are_audited(client, token):
    r = client.get("/metrics")
    assert r.status_code == 401, r.text
    r = client.get("/metrics", headers=token("metrics-reader"))
    assert r.status_code == 403, r.text
    assert r.json()["error_code"] == "PERMISSION_DENIED"

    admin = client.get("/metrics", headers=token())
    assert admin.status_code == 200, admin.text
    assert admin.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE catalog_index_lag_changes gauge" in admin.text
    assert "# TYPE catalog_index_failures_total counter" in admin.text
    values = parse(admin.text)
    for name in (
        "catalog_index_lag_changes",
        "catalog_index_healthy",
        "catalog_index_failures_total",
        "catalog_index_documents",
        "catalog_embedding_backlog_entries",
        "catalog_embedding_healthy",
        "catalog_embedding_failures_total",
        "catalog_embedded_entries_total",
    ):
        assert name in values, name

    ms = client.get(f"{UC}/metastore_summary", headers=token()).json()["metastore_id"]
    r = client.patch(
        f"{UC}/permissions/metastore/{ms}",
        headers=token(),
        json={"changes": [{"principal": "metrics-reader", "add": ["READ_AUDIT"]}]},
    )
    assert r.status_code == 200, r.text
    assert client.get("/metrics", headers=token("metrics-reader")).status_code == 200

    def audited(**params: str) -> list[dict]:  # type: ignore[type-arg]
        r = client.get(AUDIT, headers=token(), params={"action_name": "system.metrics", **params})
        assert r.status_code == 200, r.text
        return list(r.json()["events"])

    readers = wait_for(
        lambda: len(events := audited(principal="metrics-reader")) >= 2 and events,
        "the metrics requests in the audit log",
    )
    assert sorted(e["decision"] for e in readers) == ["allow", "deny"]
    # (the admin asks for metrics in other tests too: its request is found by its id)
    assert admin.headers["x-request-id"] in [e["request_id"] for e in audited(principal="admin")]


def test_metrics_report_the_index_lag_while_commits_fail(client, token, monkeypatch):
    body = {"name": "met", "catalog_name": "main", "schema_name": "default"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    wait_for(lambda: metrics(client, token)["catalog_index_lag_changes"] == 0, "an idle index")
    failures = metrics(client, token)["catalog_index_failures_total"]
    documents = metrics(client, token)["catalog_index_documents"]

    real = FullTextIndex.commit

    def full(self: FullTextIndex) -> None:
        raise ValueError("An IO error occurred: 'No space left on device (os error 28)'")

    monkeypatch.setattr(FullTextIndex, "commit", full)
    for i in range(2):
        r = client.post(
            f"{STORE}/entries",
            headers=token(),
            params={"scope": "u"},
            json={"path": f"/m{i}.md", "contents": "x"},
        )
        assert r.status_code == 200, r.text
    failing = wait_for(
        lambda: (m := metrics(client, token))["catalog_index_failures_total"] >= failures + 2 and m,
        "failed index commits",
    )
    assert failing["catalog_index_healthy"] == 0
    assert failing["catalog_index_lag_changes"] == 2
    assert failing["catalog_index_failing_seconds"] > 0
    assert failing["catalog_index_documents"] == documents

    monkeypatch.setattr(FullTextIndex, "commit", real)
    caught_up = wait_for(
        lambda: (m := metrics(client, token))["catalog_index_healthy"] == 1 and m, "the index to recover"
    )
    assert caught_up["catalog_index_lag_changes"] == 0
    assert caught_up["catalog_index_failing_seconds"] == 0
    assert caught_up["catalog_index_documents"] == documents + 2
