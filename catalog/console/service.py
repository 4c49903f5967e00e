"""What each console page shows, from the services the REST routes call (namespace, permissions,
entries, audit, lineage): each of them authorizes through the access seam and records the
decision for the request's one audit event. What a page merely offers (a grants form, the entries
of a store) is decided with `Access.visible`, which records nothing, so an offer not taken is not
a denial; a request for something refused (another principal's privileges, a store's entries
without READ or in a scope the store's binding or a scope grant refuses, a grant without MANAGE)
reaches its service and is answered 403.

Such a refusal of one part of a page (`Refusal`) is answered inside the page it was asked from,
with the refusal's status: the store page with its entries panel (or its effective privileges)
saying what was refused and why, the page of a grants form with its grants panel saying it. Only
a page that cannot be shown at all (its object refused or missing) is an error page.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import cast

from catalog.access import Securable, SecurableType
from catalog.access.actions import GRANTABLE, SCOPABLE
from catalog.access.trust import TrustPolicy
from catalog.audit.auditors import service as audit
from catalog.auth import Principal
from catalog.console.charts import LineageGraph, TimelineChart, lineage_graph, timeline_chart
from catalog.context import Context
from catalog.entries import operations as ops
from catalog.entries import service as entries
from catalog.entries.repo import EntryRow
from catalog.errors import CatalogError, FieldError, InvalidParameter
from catalog.governance.namespace import service as namespace
from catalog.governance.namespace.schemas import CatalogInfo, MemoryStoreInfo, SchemaInfo
from catalog.governance.permissions import service as permissions
from catalog.governance.permissions.schemas import PermissionsChange, PrivilegeAssignment, UpdatePermissions
from catalog.lineage import service as lineage
from catalog.wire.inputs import MAX_PRINCIPAL, blank

LIST_PAGE = 50  # rows of a listing page (the server's page cap lowers it)
ENTRIES_PAGE = 20
REVIEW_PAGE = 20  # held entries the store page shows (the API and the command list the rest)
SEARCH_TOP_K = 10
AUDIT_PAGE = 50
MAX_GRANT_PAGES = 20  # a grants panel reads at most this many pages of grants
SEARCH_MODES = ("hybrid", "keyword", "semantic")
DECISIONS = audit.DECISIONS

# the console's paths of each securable type, and the type's name in the permissions API
PAGE_OF = {
    SecurableType.CATALOG: "/console/catalogs/",
    SecurableType.SCHEMA: "/console/schemas/",
    SecurableType.MEMORY_STORE: "/console/stores/",
}
API_TYPE = {
    SecurableType.CATALOG: "catalog",
    SecurableType.SCHEMA: "schema",
    SecurableType.MEMORY_STORE: "memory_store",
}


# --- refusals inside a page ---------------------------------------------------------------------------

# what a part of a page may be refused with and still be shown inside it: bad input, a privilege or a
# rule that refuses, something gone, too large (not a missing session, a rate limit or an outage)
REFUSED_INSIDE = frozenset({400, 403, 404, 409, 413})


@dataclass(frozen=True)
class Refusal:
    """What the server answered a part of a page: the page is answered with `status`, and the part
    says `message` (naming `field` when the input was at fault)."""

    status: int
    error_code: str
    message: str
    field: str | None = None

    @staticmethod
    def of(err: CatalogError) -> Refusal:
        field_name = err.field if isinstance(err, FieldError) else None
        return Refusal(err.status_code, err.error_code, err.message, field_name)


def refused_inside(err: Exception) -> bool:
    """Whether `err` refuses one part of a page, to be said inside it (`Refusal`)."""
    return isinstance(err, CatalogError) and err.status_code in REFUSED_INSIDE


# --- grants ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grants:
    """A securable's grants, and whether the caller may change them."""

    securable_type: str  # as the permissions API names it: catalog, schema, memory_store
    full_name: str
    assignments: list[PrivilegeAssignment]
    grantable: tuple[str, ...]  # what may be granted on this type (the <select>)
    may_change: bool
    truncated: bool  # more grants than a panel shows
    scopable: tuple[str, ...] = SCOPABLE  # the privileges a grant may limit to scope patterns


async def grants_panel(ctx: Context, principal: Principal, securable: Securable) -> Grants | None:
    """The grants of the securable, when the caller may see them (any privilege on it)."""
    if not ctx.access.visible(principal, "permissions.get", securable):
        return None
    kind = API_TYPE[securable.type]
    assignments: list[PrivilegeAssignment] = []
    token: str | None = None
    for _ in range(MAX_GRANT_PAGES):
        listed = await permissions.get_permissions(
            ctx, principal, kind, securable.full_name, None, ctx.settings.page_cap, token
        )
        assignments += listed.privilege_assignments
        token = listed.next_page_token
        if token is None:
            break
    return Grants(
        securable_type=kind,
        full_name=securable.full_name,
        assignments=assignments,
        grantable=tuple(p.value for p in GRANTABLE[securable.type]),
        may_change=ctx.access.visible(principal, "permissions.update", securable),
        truncated=token is not None,
    )


@dataclass(frozen=True)
class GrantForm:
    """What a grants form asks for: add or remove one privilege of one principal, limited to (or
    taking away) scope patterns when `scopes` is given."""

    op: str  # add | remove
    principal: str
    privilege: str
    scopes: list[str] | None  # None: no patterns (an addition then holds in every scope)


def grant_form(securable_type: str, form: dict[str, str]) -> GrantForm:
    """The change a grants form asks for, or 400 naming the field. `scopes` is one pattern per
    line (blank lines and the spaces around a pattern are left out); the permissions service
    checks the patterns."""
    kind = permissions.parse_securable_type(securable_type)
    if kind not in API_TYPE:
        raise InvalidParameter(
            "grants are changed here on catalogs, schemas and memory stores", "securable_type"
        )
    op = form.get("op", "")
    if op not in ("add", "remove"):
        raise InvalidParameter("op must be add or remove", "op")
    who = form.get("principal", "").strip()
    if blank(who) or len(who) > MAX_PRINCIPAL:
        raise InvalidParameter(
            f"enter a principal or group name of 1-{MAX_PRINCIPAL} characters", "principal"
        )
    privilege = form.get("privilege", "")
    allowed = tuple(p.value for p in GRANTABLE[kind])
    if privilege not in allowed:
        raise InvalidParameter(
            f"choose one of {', '.join(allowed)} (on a {kind.value.lower().replace('_', ' ')})",
            "privilege",
        )
    patterns = [line.strip() for line in form.get("scopes", "").splitlines() if line.strip()]
    return GrantForm(op, who, privilege, patterns or None)


async def change_grant(
    ctx: Context, principal: Principal, securable_type: str, full_name: str, change: GrantForm
) -> tuple[str, str]:
    """Make the form's change through the permissions service: the console page to go back to,
    and what became of the grant (the page's notice): `granted`, `revoked`, `limited` (granted
    in the scopes given), `unlimited` (patterns given for a privilege held in every scope, which
    stays so) or `narrowed` (patterns taken from a limited grant that keeps others)."""
    scopes = change.scopes
    body = UpdatePermissions(
        changes=[
            PermissionsChange(principal=change.principal, add=[change.privilege], scopes=scopes)
            if change.op == "add"
            else PermissionsChange(principal=change.principal, remove=[change.privilege], scopes=scopes)
        ],
        omit_permissions_in_response=scopes is None,
    )
    after = await permissions.update_permissions(ctx, principal, securable_type, full_name, body)
    kind = permissions.parse_securable_type(securable_type)
    target = PAGE_OF[kind] + full_name.lower()
    if scopes is None:
        return target, "granted" if change.op == "add" else "revoked"
    held = next((a for a in after.privilege_assignments if a.principal == change.principal), None)
    if held is None or change.privilege not in held.privileges:
        return target, "revoked"
    limited = change.privilege in held.scopes
    if change.op == "add":
        return target, "limited" if limited else "unlimited"
    return target, "narrowed"


# --- browsing ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogsPage:
    catalogs: list[CatalogInfo]
    next_page_token: str | None


async def catalogs_page(ctx: Context, principal: Principal, page_token: str | None) -> CatalogsPage:
    listed = await namespace.list_catalogs(ctx, principal, LIST_PAGE, page_token)
    return CatalogsPage(listed.catalogs, listed.next_page_token)


@dataclass(frozen=True)
class CatalogPage:
    catalog: CatalogInfo
    schemas: list[SchemaInfo]
    next_page_token: str | None
    grants: Grants | None
    grants_refused: Refusal | None = None  # a grants form sent from this page, refused

    @property
    def refusal(self) -> Refusal | None:
        return self.grants_refused


async def catalog_page(ctx: Context, principal: Principal, name: str, page_token: str | None) -> CatalogPage:
    catalog = await namespace.get_catalog(ctx, principal, name)
    listed = await namespace.list_schemas(ctx, principal, catalog.name, LIST_PAGE, page_token)
    securable = await ctx.access.locate(SecurableType.CATALOG, [catalog.name])
    grants = await grants_panel(ctx, principal, securable)
    return CatalogPage(catalog, listed.schemas, listed.next_page_token, grants)


@dataclass(frozen=True)
class SchemaPage:
    schema: SchemaInfo
    stores: list[MemoryStoreInfo]
    next_page_token: str | None
    grants: Grants | None
    grants_refused: Refusal | None = None  # a grants form sent from this page, refused

    @property
    def refusal(self) -> Refusal | None:
        return self.grants_refused


async def schema_page(
    ctx: Context, principal: Principal, full_name: str, page_token: str | None
) -> SchemaPage:
    schema = await namespace.get_schema(ctx, principal, full_name)
    listed = await namespace.list_stores(
        ctx, principal, schema.catalog_name, schema.name, LIST_PAGE, page_token
    )
    securable = await ctx.access.locate(SecurableType.SCHEMA, [schema.catalog_name, schema.name])
    grants = await grants_panel(ctx, principal, securable)
    return SchemaPage(schema, listed.memory_stores, listed.next_page_token, grants)


# --- a memory store ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Where one effective privilege comes from, said for people."""

    privilege: str
    how: str  # "granted READ_MEMORY_STORE", "ownership", "metastore admin", "granted ALL_PRIVILEGES"
    where: str  # "directly on this memory store", "inherited from schema main.default", ...
    inherited: bool
    group: str | None  # the group it comes through; None: held by the principal itself
    scopes: str  # "team-a, team-a:*" (held only there), "every scope", or "—" (not a store's data)


@dataclass(frozen=True)
class EntriesView:
    scope: str
    query: str
    mode: str
    rows: list[tuple[EntryRow, float | None]]  # with the score of a search hit
    next_page_token: str | None
    degraded: tuple[str, ...] = ()  # the search legs that may have missed entries


@dataclass(frozen=True)
class TrustView:
    """The store's trust policy (None: none) and, for a MANAGE holder, its review queue."""

    policy: TrustPolicy | None
    may_review: bool
    held: list[EntryRow] = field(default_factory=list)  # the first page of the review queue
    more_held: bool = False  # the queue holds more than the page shows


@dataclass(frozen=True)
class StorePage:
    store: MemoryStoreInfo
    grants: Grants | None
    about: str  # whose effective privileges are shown
    sources: list[Source]
    may_ask_others: bool  # the caller may look at another principal's privileges
    may_read_entries: bool
    may_read_audit: bool  # READ_AUDIT: the lineage and the audit log
    entries: EntriesView | None = None
    trust: TrustView | None = None  # the store's trust policy, and its review queue for a manager
    effective_refused: Refusal | None = None  # another principal's privileges, asked and refused
    entries_refused: Refusal | None = None  # the scope's entries (or its search), asked and refused
    grants_refused: Refusal | None = None  # a grants form sent from this page, refused

    @property
    def refusal(self) -> Refusal | None:
        """The first refusal the page shows (its status is the page's)."""
        return self.grants_refused or self.effective_refused or self.entries_refused


def _where(held: permissions.Held) -> str:
    if not held.inherited:
        return "directly on this memory store"
    if held.source_type == SecurableType.METASTORE.value:
        return "inherited from the metastore"
    return f"inherited from {held.source_type.lower().replace('_', ' ')} {held.source_name}"


def _source(held: permissions.Held, about: str) -> Source:
    if held.basis == "ADMIN":
        how = "metastore admin"
    elif held.basis == "OWNER":
        how = "ownership"
    else:
        how = f"granted {held.basis}"
    return Source(
        privilege=held.privilege,
        how=how,
        where=_where(held),
        inherited=held.inherited,
        group=held.grantee if held.grantee != about else None,
        scopes=_limit(held),
    )


def _limit(held: permissions.Held) -> str:
    if held.scopes is not None:
        return ", ".join(held.scopes)
    return "every scope" if held.privilege in SCOPABLE else "—"


async def store_page(
    ctx: Context,
    principal: Principal,
    full_name: str,
    *,
    about: str | None,
    scope: str | None,
    query: str | None,
    mode: str | None,
    page_token: str | None,
) -> StorePage:
    """The page of a store the caller holds any privilege on (403 otherwise, like its REST
    metadata): its grants, someone's effective privileges, and entries of one scope (listed, or
    searched with `query`)."""
    store, securable = await namespace.see_store(ctx, principal, full_name)
    grants = await grants_panel(ctx, principal, securable)
    about = about.strip() if about and about.strip() else None
    effective_refused = None
    try:
        effective = await permissions.effective_holdings(
            ctx, principal, "memory_store", store.full_name, about
        )
        about, sources = effective.about, [_source(h, effective.about) for h in effective.held]
    except Exception as err:
        if not refused_inside(err) or about is None:
            raise
        effective_refused, sources = Refusal.of(cast(CatalogError, err)), []
    metastore = await ctx.access.locate(SecurableType.METASTORE)
    page = StorePage(
        store=store,
        grants=grants,
        about=about or principal.name,
        sources=sources,
        may_ask_others=ctx.access.visible(principal, "effective_permissions.other", securable),
        # the form is offered to a reader of some scopes too: each request is held to its scope
        may_read_entries=ctx.access.visible_somewhere(principal, "entries.read", securable),
        may_read_audit=ctx.access.visible(principal, "audit.read", metastore),
        effective_refused=effective_refused,
        trust=await _trust(ctx, principal, securable),
    )
    if scope is None or not scope.strip():
        return page
    try:
        return replace(
            page, entries=await _entries(ctx, principal, store.full_name, scope, query, mode, page_token)
        )
    except Exception as err:
        if not refused_inside(err):
            raise
        refused = cast(CatalogError, err)
        empty = EntriesView(scope, (query or "").strip(), mode or "hybrid", [], None)
        return replace(page, entries=empty, entries_refused=Refusal.of(refused))


async def _trust(ctx: Context, principal: Principal, securable: Securable) -> TrustView:
    """The store's trust policy (whoever sees the store may read it) and, for a MANAGE holder,
    the first page of its review queue."""
    policy = await namespace.trust_policy(ctx, securable)
    if not entries.may_review(ctx, principal, securable):
        return TrustView(policy, may_review=False)
    queue = await entries.quarantined(
        ctx, principal, ops.Quarantined(store=securable.full_name, page_size=REVIEW_PAGE)
    )
    return TrustView(policy, True, queue.rows, queue.next_page_token is not None)


REVIEW_FIELDS = frozenset({"csrf", "scope", "path", "session_id", "etag", "decision", "reason"})


def review_form(full_name: str, form: dict[str, str]) -> ops.Review:
    """The decision a review form sends (400 naming the field)."""
    decision = form.get("decision", "")
    if decision not in ("approve", "reject"):
        raise InvalidParameter("decision must be approve or reject", "decision")
    etag = form.get("etag", "").strip()
    if etag and not etag.isdigit():
        raise InvalidParameter("etag must be a version number", "etag")
    reason = form.get("reason", "").strip() or None
    key = ops.ByKey(
        scope=form.get("scope", ""), path=form.get("path", ""), session_id=form.get("session_id") or None
    )
    return ops.Review(
        store=full_name,
        key=key,
        decision=decision,  # type: ignore[arg-type]  # approve or reject, checked above
        if_match=int(etag) if etag else None,
        reason=reason,
        channel=ops.Channel(via="console"),
    )


async def review(ctx: Context, principal: Principal, full_name: str, form: dict[str, str]) -> str:
    """Approve or reject a held entry from the store page; what became of it (the page's notice)."""
    done = await entries.review(ctx, principal, review_form(full_name, form))
    return "approved" if done.decision == "approve" else "rejected"


async def _entries(
    ctx: Context,
    principal: Principal,
    store: str,
    scope: str,
    query: str | None,
    mode: str | None,
    page_token: str | None,
) -> EntriesView:
    """A scope's entries, listed (a page of them) or searched with `query`."""
    chosen_mode = mode or "hybrid"
    if chosen_mode not in SEARCH_MODES:
        raise InvalidParameter(f"mode must be one of {', '.join(SEARCH_MODES)}", "mode")
    text = (query or "").strip()
    rows: list[tuple[EntryRow, float | None]]
    token = None
    degraded: tuple[str, ...] = ()
    if text:
        hits = await entries.search(
            ctx,
            principal,
            ops.Search(
                store=store,
                scopes=(scope,),
                query=text,
                top_k=SEARCH_TOP_K,
                mode=cast(ops.SearchMode, chosen_mode),
            ),
        )
        rows = [(row, score) for row, score in hits.hits]
        degraded = hits.degraded
    else:
        listed = await entries.list_entries(
            ctx,
            principal,
            ops.List(
                store=store,
                scopes=(scope,),
                page_size=ENTRIES_PAGE,
                page_token=page_token,
                listing="console",
            ),
        )
        rows = [(row, None) for row in listed.rows]
        token = listed.next_page_token
    return EntriesView(scope, text, chosen_mode, rows, token, degraded)


# --- audit and lineage ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditFilters:
    principal: str | None = None
    action: str | None = None
    decision: str | None = None
    securable: str | None = None
    since: str | None = None  # as typed: YYYY-MM-DDTHH:MM[:SS], UTC
    until: str | None = None

    def query(self) -> dict[str, str]:
        """The filters as the page's query parameters (for the next page's link)."""
        return {k: v for k, v in self.__dict__.items() if v}


def _instant(value: str | None, field_name: str) -> int | None:
    """A `datetime-local` value (UTC) as epoch milliseconds, or 400 naming the field."""
    if value is None or not value.strip():
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidParameter(
            f"write a time as YYYY-MM-DDTHH:MM (UTC), not {value[:40]!r}", field_name
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    millis = int(moment.timestamp() * 1000)
    if not 0 <= millis <= lineage.MAX_EPOCH_MS:
        raise InvalidParameter("the time is out of range", field_name)
    return millis


@dataclass(frozen=True)
class AuditPage:
    filters: AuditFilters
    events: list[audit.AuditEvent]
    next_page_token: str | None
    chart: TimelineChart
    decisions: tuple[str, ...] = field(default=DECISIONS)


async def audit_page(
    ctx: Context, principal: Principal, filters: AuditFilters, page_token: str | None
) -> AuditPage:
    start = _instant(filters.since, "since")
    end = _instant(filters.until, "until")
    if start is not None and end is not None and end <= start:
        raise InvalidParameter("must be later than since", "until")
    if filters.decision is not None and filters.decision not in DECISIONS:
        raise InvalidParameter(f"decision must be one of {', '.join(DECISIONS)}", "decision")
    listed = await audit.list_events(
        ctx,
        principal,
        start_time=start,
        end_time=end,
        who=filters.principal,
        action_name=filters.action,
        securable_full_name=filters.securable,
        decision=filters.decision,
        status_code=None,
        order=None,
        size=AUDIT_PAGE,
        page_token=page_token,
    )
    timeline = await audit.timeline(
        ctx,
        principal,
        start_time=start,
        end_time=end,
        who=filters.principal,
        action_name=filters.action,
        securable_full_name=filters.securable,
        decision=filters.decision,
    )
    return AuditPage(filters, listed.events, listed.next_page_token, timeline_chart(timeline))


@dataclass(frozen=True)
class LineagePage:
    full_name: str
    direction: str
    depth: int
    graph: LineageGraph


async def lineage_page(
    ctx: Context, principal: Principal, full_name: str, direction: str | None, depth: str | None
) -> LineagePage:
    hops = lineage.DEFAULT_DEPTH
    if depth is not None and depth.strip():
        if not depth.strip().isdigit() or not 1 <= int(depth) <= lineage.MAX_DEPTH:
            raise InvalidParameter(f"depth must be a whole number from 1 to {lineage.MAX_DEPTH}", "depth")
        hops = int(depth)
    found = await lineage.lineage(ctx, principal, full_name, direction or None, None, None, None, hops)
    return LineagePage(found.securable_full_name, found.direction, hops, lineage_graph(found))
