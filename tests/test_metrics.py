"""`GET /metrics`: Prometheus text, a token and READ_AUDIT on the metastore needed, audited, and
the full-text index's lag and failures as they happen; the exposition is parsed strictly (as
Prometheus's text format 0.0.4 says) and every metric is named by the rules: base units in the
name (`_seconds`, `_bytes`), counters ending in `_total`, and labels whose values are bounded (a
route template, an action, a leg; never a user, scope, path or id)."""

from __future__ import annotations

import math
import re
import time
import uuid
from dataclasses import dataclass, field

from rest import UC

from catalog.search.fulltext import FullTextIndex

AUDIT = f"{UC}/system/audit"
STORE = f"{UC}/memory-stores/main.default.met"

# --- a strict parser of the text format (prometheus_client is not a dependency) -------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})? (\S+)$")
KINDS = {"counter", "gauge", "histogram", "summary", "untyped"}


@dataclass
class Family:
    name: str
    kind: str
    help: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def _labels(text: str, line: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    rest = text
    while rest:
        found = _LABEL.match(rest)
        assert found, f"malformed labels in {line!r}"
        name, value = found.group(1), found.group(2)
        assert name not in labels, f"label {name} twice in {line!r}"
        labels[name] = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)
        rest = rest[found.end() :]
        if rest:
            assert rest.startswith(","), f"malformed labels in {line!r}"
            rest = rest[1:]
    return labels


def _value(text: str, line: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    assert re.fullmatch(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", text), f"not a number in {line!r}"
    return float(text)


def exposition(text: str) -> dict[str, Family]:
    """Every family, strictly: HELP then TYPE once per family, then only its own samples (a
    histogram's `_bucket` with `le`, `_sum`, `_count`), no sample without a family."""
    assert text.endswith("\n"), "the exposition ends with a newline"
    families: dict[str, Family] = {}
    current: Family | None = None
    helped: dict[str, str] = {}
    for line in text.splitlines():
        assert line and line == line.strip(), f"blank or padded line {line!r}"
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert re.fullmatch(_NAME, name) and name not in helped and name not in families, line
            helped[name] = help_text
            continue
        if line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert kind in KINDS and name in helped and name not in families, line
            current = families[name] = Family(name, kind, helped[name])
            continue
        assert not line.startswith("#"), f"unknown comment {line!r}"
        found = _SAMPLE.match(line)
        assert found and current is not None, f"malformed sample {line!r}"
        name, value = found.group(1), _value(found.group(3), line)
        labels = _labels(found.group(2) or "", line)
        own = {current.name}
        if current.kind == "histogram":
            own = {f"{current.name}_bucket", f"{current.name}_sum", f"{current.name}_count"}
            assert ("le" in labels) == name.endswith("_bucket"), line
        assert name in own, f"{name} is not a sample of {current.name}"
        current.samples.append((name, labels, value))
    for family in families.values():
        if family.kind == "histogram":
            _check_histogram(family)
    return families


def _check_histogram(family: Family) -> None:
    """Each label set's buckets rise in `le`, count cumulatively and end at +Inf = `_count`."""
    series: dict[tuple[tuple[str, str], ...], dict[str, list[tuple[float, float]] | float]] = {}
    for name, labels, value in family.samples:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        entry = series.setdefault(key, {"buckets": []})
        if name.endswith("_bucket"):
            entry["buckets"].append((_value(labels["le"], name), value))  # type: ignore[union-attr]
        else:
            entry[name.rsplit("_", 1)[1]] = value
    for key, entry in series.items():
        buckets = entry["buckets"]
        assert isinstance(buckets, list) and buckets, (family.name, key)
        bounds = [b for b, _ in buckets]
        counts = [c for _, c in buckets]
        assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds) and math.isinf(bounds[-1])
        assert counts == sorted(counts), (family.name, key, counts)
        assert entry["count"] == counts[-1] and entry["sum"] >= 0, (family.name, key)


def parse(text: str) -> dict[str, float]:
    """name (or `name{label="value",...}`, labels in order) -> value, from a strictly parsed
    exposition."""
    values: dict[str, float] = {}
    for family in exposition(text).values():
        for name, labels, value in family.samples:
            key = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
            values[key] = value
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
        "catalog_index_commits_total",
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
    commits = metrics(client, token)["catalog_index_commits_total"]

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
    assert failing["catalog_index_commits_total"] == commits  # a failed commit is not counted

    monkeypatch.setattr(FullTextIndex, "commit", real)
    caught_up = wait_for(
        lambda: (m := metrics(client, token))["catalog_index_healthy"] == 1 and m, "the index to recover"
    )
    assert caught_up["catalog_index_lag_changes"] == 0
    assert caught_up["catalog_index_failing_seconds"] == 0
    assert caught_up["catalog_index_documents"] == documents + 2
    assert caught_up["catalog_index_commits_total"] > commits


# --- names, types, units, labels ------------------------------------------------------------------

# every family and its labels (the `le` of a histogram's buckets aside): nothing else may appear
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "http_server_request_duration_seconds": (
        "histogram",
        ("http_request_method", "http_route", "http_response_status_code"),
    ),
    "catalog_memory_operation_duration_seconds": ("histogram", ("operation",)),
    "catalog_search_leg_duration_seconds": ("histogram", ("leg",)),
    "catalog_search_fusion_duration_seconds": ("histogram", ()),
    "catalog_embedding_duration_seconds": ("histogram", ("queue",)),
    "catalog_audit_append_duration_seconds": ("histogram", ()),
    "catalog_audit_chain_held_total": ("counter", ()),
    "catalog_authorization_denials_total": ("counter", ("action",)),
    "catalog_pipeline_run_duration_seconds": ("histogram", ("outcome",)),
    "catalog_erasures_total": ("counter", ("kind",)),
    "process_resident_memory_bytes": ("gauge", ()),
    "catalog_index_lag_changes": ("gauge", ()),
    "catalog_index_lag_seconds": ("gauge", ()),
    "catalog_index_watermark": ("gauge", ()),
    "catalog_index_documents": ("gauge", ()),
    "catalog_index_commits_total": ("counter", ()),
    "catalog_index_healthy": ("gauge", ()),
    "catalog_index_failures_total": ("counter", ()),
    "catalog_index_failing_seconds": ("gauge", ()),
    "catalog_transcript_index_lag_changes": ("gauge", ()),
    "catalog_transcript_index_lag_seconds": ("gauge", ()),
    "catalog_change_log_backlog_changes": ("gauge", ("log",)),
    "catalog_embedding_backlog_entries": ("gauge", ()),
    "catalog_embedding_queue_texts": ("gauge", ("queue",)),
    "catalog_embedding_healthy": ("gauge", ()),
    "catalog_embedding_failures_total": ("counter", ()),
    "catalog_embedding_failing_seconds": ("gauge", ()),
    "catalog_embedded_entries_total": ("counter", ()),
    "catalog_embedder_batches_total": ("counter", ()),
    "catalog_embedder_texts_total": ("counter", ()),
}
# the values a bounded label may take (http_route: a template of the app's routes, or none)
BOUNDED = {
    "http_request_method": {
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "DELETE",
        "CONNECT",
        "OPTIONS",
        "TRACE",
        "PATCH",
        "_OTHER",
    },
    "operation": {
        "search_memory",
        "create_memory",
        "update_memory",
        "delete_memory",
        "create_memory_store",
        "delete_memory_store",
    },
    "leg": {"keyword", "semantic"},
    "queue": {"urgent", "background"},
    "outcome": {"succeeded", "failed"},
    "kind": {"scope_in_store", "scope", "subject"},
    "log": {"entry_changes", "transcript_changes"},
}
NOT_BASE_UNITS = re.compile(
    r"_(milliseconds|ms|microseconds|us|minutes|hours|days|kilobytes|kb|megabytes|mb|percent)(_|$)"
)


def _routes(client) -> set[str]:  # type: ignore[no-untyped-def]
    """Every route template of the app (and the MCP mount's)."""
    paths = {route.path_format for route in client.app.routes}
    return paths | {"/mcp/memory-stores/{full_name}"}


def test_every_metric_is_named_by_the_rules_and_its_labels_are_bounded(client, token):
    tag = uuid.uuid4().hex[:8]
    body = {"name": f"units_{tag}", "catalog_name": "main", "schema_name": "default"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    store = f"{UC}/memory-stores/main.default.units_{tag}"
    scope = f"user-{tag}"
    r = client.post(
        f"{store}/entries", headers=token(), json={"scope": scope, "path": f"/p-{tag}.md", "contents": "tea"}
    )
    assert r.status_code == 200, r.text
    r = client.post(f"{store}/entries:search", headers=token(), json={"scope": scope, "query": "tea"})
    assert r.status_code == 200 and r.json()["results"], r.text
    for i in range(3):  # paths that name things: none may become a label value
        assert (
            client.get(f"{UC}/memory-stores/main.default.none_{tag}_{i}", headers=token()).status_code == 404
        )
        assert client.get(f"/nowhere-{tag}-{i}", headers=token()).status_code == 404
    assert client.get("/metrics", headers=token(f"nobody-{tag}")).status_code == 403  # a denial
    r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": f"gone-{tag}"})
    assert r.status_code == 200, r.text

    r = client.get("/metrics", headers=token())
    assert r.status_code == 200, r.text
    families = exposition(r.text)
    assert set(families) == set(FAMILIES), set(families) ^ set(FAMILIES)
    routes = _routes(client)
    for name, family in families.items():
        kind, labels = FAMILIES[name]
        assert family.kind == kind and family.help.strip(), name
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name) and name.startswith(
            ("catalog_", "http_server_", "process_")
        )
        assert name.endswith("_total") == (kind == "counter"), name  # counters, and only they
        assert not NOT_BASE_UNITS.search(name), f"{name}: base units only (seconds, bytes)"
        if kind == "histogram":
            assert name.endswith("_seconds"), name  # every histogram here is a duration
        if "duration" in name or "lag_seconds" in name or "failing" in name:
            assert name.endswith("_seconds"), name
        for sample, sample_labels, value in family.samples:
            assert set(sample_labels) - {"le"} == set(labels), (sample, sample_labels)
            assert value >= 0 or kind == "gauge", (sample, value)
            for label, text in sample_labels.items():
                assert tag not in text, f"{sample}: {label}={text!r} names something the requests named"
                if label in BOUNDED:
                    assert text in BOUNDED[label], (sample, label, text)
                elif label == "http_route":
                    assert text == "" or text in routes, (sample, text)
                elif label == "http_response_status_code":
                    assert re.fullmatch(r"[1-5][0-9][0-9]", text), (sample, text)
                elif label == "action":
                    assert re.fullmatch(r"[a-z_]+\.[a-z_]+", text), (sample, text)
                else:
                    assert label == "le", (sample, label)

    values = parse(r.text)
    searched = f"{UC}/memory-stores/{{full_name}}/entries:search"
    assert (
        values[
            "http_server_request_duration_seconds_count"
            f'{{http_request_method="POST",http_route="{searched}",http_response_status_code="200"}}'
        ]
        >= 1
    )
    # the six 404s are counted under route templates (the paths' names are nowhere: checked above)
    not_found = [
        v
        for k, v in values.items()
        if k.startswith("http_server_request_duration_seconds_count{")
        and 'http_request_method="GET"' in k
        and 'http_response_status_code="404"' in k
    ]
    assert sum(not_found) >= 6
    for leg in ("keyword", "semantic"):
        assert values[f'catalog_search_leg_duration_seconds_count{{leg="{leg}"}}'] >= 1
    assert values["catalog_search_fusion_duration_seconds_count"] >= 1
    assert values['catalog_memory_operation_duration_seconds_count{operation="search_memory"}'] >= 1
    assert values['catalog_memory_operation_duration_seconds_count{operation="create_memory"}'] >= 1
    assert values['catalog_memory_operation_duration_seconds_count{operation="create_memory_store"}'] >= 1
    assert values['catalog_embedding_duration_seconds_count{queue="urgent"}'] >= 1
    assert values["catalog_audit_append_duration_seconds_count"] >= 1
    assert values['catalog_authorization_denials_total{action="system.metrics"}'] >= 1
    assert values['catalog_erasures_total{kind="scope"}'] >= 1
    assert values['catalog_change_log_backlog_changes{log="entry_changes"}'] >= 1
    assert {
        'catalog_embedding_queue_texts{queue="urgent"}',
        'catalog_embedding_queue_texts{queue="background"}',
    } <= set(values)
    assert values["catalog_index_lag_seconds"] >= 0
    assert values["process_resident_memory_bytes"] > 1_000_000


def test_the_index_lag_in_seconds_grows_while_commits_fail(client, token, monkeypatch):
    body = {"name": "lagging", "catalog_name": "main", "schema_name": "default"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    wait_for(lambda: metrics(client, token)["catalog_index_lag_changes"] == 0, "an idle index")
    assert metrics(client, token)["catalog_index_lag_seconds"] == 0

    def full(self: FullTextIndex) -> None:
        raise ValueError("An IO error occurred: 'No space left on device (os error 28)'")

    monkeypatch.setattr(FullTextIndex, "commit", full)
    r = client.post(
        f"{UC}/memory-stores/main.default.lagging/entries",
        headers=token(),
        json={"scope": "u", "path": "/lag.md", "contents": "x"},
    )
    assert r.status_code == 200, r.text
    first = wait_for(
        lambda: metrics(client, token)["catalog_index_lag_seconds"] > 0 and metrics(client, token), "a lag"
    )
    time.sleep(0.3)
    later = metrics(client, token)
    assert later["catalog_index_lag_changes"] >= 1
    assert later["catalog_index_lag_seconds"] >= first["catalog_index_lag_seconds"] + 0.25
    monkeypatch.undo()
    wait_for(lambda: metrics(client, token)["catalog_index_lag_seconds"] == 0, "the index to catch up")
