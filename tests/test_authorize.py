"""The privilege rules, checked on the authorizer itself (no HTTP): a truth table, and a
differential test against a brute-force oracle on random grant graphs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog.access import ACTIONS, Authorizer, Node, Securable, SecurableType, action
from catalog.access.actions import EFFECTIVE, GRANTABLE, METASTORE_ADMIN
from catalog.access.policy import ACCOUNT_USERS
from catalog.auth import Principal

M, C, S, T = SecurableType.METASTORE, SecurableType.CATALOG, SecurableType.SCHEMA, SecurableType.MEMORY_STORE
DATA = {"READ_MEMORY_STORE", "WRITE_MEMORY_STORE"}


class World:
    """A namespace (metastore → catalogs → schemas → stores) with owners, grants and groups."""

    def __init__(self, admin: str = "root") -> None:
        self.metastore = Node(M, "ms", "ms", admin)
        self.nodes: dict[str, Node] = {"ms": self.metastore}
        self.authorizer = Authorizer(admin, self.metastore)
        self.grants: set[tuple[str, str, str]] = set()  # (grantee, full_name, privilege)
        self.parents: dict[str, set[str]] = {}  # member (principal or group name) → group names

    def add(self, securable_type: SecurableType, full_name: str, owner: str = "root") -> Node:
        node = Node(securable_type, full_name, f"id:{full_name}", owner)
        self.nodes[full_name] = node
        self.authorizer._cache.clear()  # owners are part of the key, but names are reused here
        return node

    def grant(self, grantee: str, full_name: str, privilege: str) -> None:
        self.grants.add((grantee, full_name, privilege))
        node_id = "ms" if full_name == "ms" else self.nodes[full_name].id
        self.authorizer.apply("grant", "add", node_id, grantee, privilege)

    def group(self, name: str, members: list[str]) -> None:
        if name not in self.authorizer.policy.group_ids:
            self.authorizer.apply("group", "add", f"gid:{name}", name, "")
        for member in members:
            if member in self.authorizer.policy.group_ids:
                self.authorizer.apply("member", "add", f"gid:{name}", "group", f"gid:{member}")
            else:
                self.authorizer.apply("member", "add", f"gid:{name}", "principal", member)
            self.parents.setdefault(member, set()).add(name)

    def securable(self, securable_type: SecurableType, full_name: str) -> Securable:
        parts = [] if securable_type == M else full_name.split(".")
        chain = [self.metastore]
        for depth in range(1, len(parts) + 1):
            node = self.nodes.get(".".join(parts[:depth]))
            if node is None:
                break
            chain.append(node)
        return Securable(securable_type, full_name, tuple(chain))

    def allowed(self, who: str, action_name: str, securable_type: SecurableType, full_name: str) -> bool:
        return self.authorizer.authorize(
            Principal(who), action(action_name), self.securable(securable_type, full_name)
        ).allowed

    # --- the oracle: the rules written out plainly ---------------------------------------------

    def subjects(self, who: str) -> set[str]:
        found, frontier = {who, ACCOUNT_USERS}, [who]
        while frontier:
            for group in self.parents.get(frontier.pop(), ()):
                if group not in found:
                    found.add(group)
                    frontier.append(group)
        return found

    def holds(self, who: str, privilege: str, securable: Securable) -> bool:
        subjects = self.subjects(who)
        if self.authorizer.admin in subjects:
            return True
        if privilege == METASTORE_ADMIN:
            return False
        for node in securable.chain:
            is_target = node is securable.chain[-1]
            if node.type != M and node.owner in subjects and (is_target or privilege not in DATA):
                return True
            for grantee, where, granted in self.grants:
                covers = granted == privilege or (granted == "ALL_PRIVILEGES" and privilege != "MANAGE")
                if where == node.full_name and grantee in subjects and covers:
                    return True
        return False

    def oracle(self, who: str, action_name: str, securable_type: SecurableType, full_name: str) -> bool:
        act = action(action_name)
        sec = self.securable(securable_type, full_name)
        privileges = EFFECTIVE[securable_type] if act.any_privilege else act.privileges
        if not privileges:
            return True
        subjects = self.subjects(who)
        if self.authorizer.admin in subjects:
            return True
        if sec.exists and sec.node.type != M and sec.node.owner in subjects:
            return True
        depth = {M: 0, C: 1, S: 2, T: 3}[securable_type]
        for level in range(1, (depth if act.inside else depth - 1) + 1):
            if len(sec.chain) <= level:
                return False
            use = "USE_CATALOG" if level == 1 else "USE_SCHEMA"
            if not self.holds(who, use, Securable(sec.chain[level].type, "", sec.chain[: level + 1])):
                return False
        if not sec.exists:
            return True
        return any(self.holds(who, p, sec) for p in privileges)


@pytest.fixture
def world() -> World:
    w = World()
    w.add(C, "corp", owner="cathy")
    w.add(S, "corp.support", owner="sam")
    w.add(T, "corp.support.mem", owner="tom")
    w.add(S, "corp.sales")
    w.add(T, "corp.sales.leads")
    w.add(C, "other")
    return w


# --- truth table -------------------------------------------------------------------------------


def test_admin_may_do_everything(world):
    for name, act in ACTIONS.items():
        on = act.on or T
        full = {M: "ms", C: "corp", S: "corp.support", T: "corp.support.mem"}[on]
        assert world.allowed("root", name, on, full), name
    assert world.allowed("root", "memory_store.get", T, "nope.nope.nope")  # then 404


def test_admin_may_be_a_group(world):
    world.authorizer.admin = "admins"
    world.group("admins", ["ada"])
    assert world.allowed("ada", "memory_store.get", T, "corp.support.mem")
    assert world.allowed("ada", "groups.manage", M, "ms")
    assert not world.allowed("bob", "groups.manage", M, "ms")


@pytest.mark.parametrize(
    ("grant_on", "privilege", "check", "expected"),
    [
        # a privilege applies at and below where it is granted
        ("corp", "READ_MEMORY_STORE", "corp.support.mem", True),
        ("corp.support", "READ_MEMORY_STORE", "corp.support.mem", True),
        ("corp.support.mem", "READ_MEMORY_STORE", "corp.support.mem", True),
        ("corp.sales", "READ_MEMORY_STORE", "corp.support.mem", False),
        ("corp.support", "WRITE_MEMORY_STORE", "corp.support.mem", False),
        # ALL_PRIVILEGES covers reading but never MANAGE
        ("corp.support", "ALL_PRIVILEGES", "corp.support.mem", True),
        ("corp.support", "MANAGE", "corp.support.mem", False),
    ],
)
def test_read_needs_the_privilege_and_use_on_parents(world, grant_on, privilege, check, expected):
    world.grant("alice", "corp", "USE_CATALOG")
    world.grant("alice", "corp", "USE_SCHEMA")
    world.grant("alice", grant_on, privilege)
    assert world.allowed("alice", "memory_store.get", T, check) is expected


def test_use_on_each_parent_is_required(world):
    world.grant("alice", "corp.support.mem", "READ_MEMORY_STORE")
    assert not world.allowed("alice", "memory_store.get", T, "corp.support.mem")
    world.grant("alice", "corp", "USE_CATALOG")
    decision = world.authorizer.authorize(
        Principal("alice"), action("memory_store.get"), world.securable(T, "corp.support.mem")
    )
    assert not decision.allowed and "USE_SCHEMA on schema corp.support" in decision.reason
    world.grant("alice", "corp.support", "USE_SCHEMA")
    assert world.allowed("alice", "memory_store.get", T, "corp.support.mem")


def test_missing_parent_is_403_missing_target_is_allowed_then_404(world):
    world.grant("alice", "corp", "USE_CATALOG")
    world.grant("alice", "corp", "USE_SCHEMA")
    assert world.allowed("alice", "memory_store.get", T, "corp.support.absent")  # → 404
    assert not world.allowed("alice", "memory_store.get", T, "corp.absent.mem")  # → 403
    assert not world.allowed("alice", "memory_store.get", T, "absent.absent.mem")


def test_creating_inside_needs_use_on_the_container_itself(world):
    world.grant("alice", "corp", "USE_CATALOG")
    world.grant("alice", "corp.support", "CREATE_MEMORY_STORE")
    assert not world.allowed("alice", "memory_store.create", S, "corp.support")
    world.grant("alice", "corp.support", "USE_SCHEMA")
    assert world.allowed("alice", "memory_store.create", S, "corp.support")


def test_owner_holds_everything_on_its_object_without_use_on_parents(world):
    for name in ("memory_store.get", "memory_store.update", "memory_store.delete", "memory_store.see"):
        assert world.allowed("tom", name, T, "corp.support.mem"), name
    assert not world.allowed("tom", "memory_store.get", T, "corp.sales.leads")


def test_owner_of_a_container_manages_below_without_data_access(world):
    assert world.allowed("cathy", "memory_store.delete", T, "corp.support.mem")
    assert world.allowed("cathy", "memory_store.update", T, "corp.sales.leads")
    assert world.allowed("cathy", "memory_store.create", S, "corp.sales")
    assert world.allowed("cathy", "permissions.update", T, "corp.support.mem")
    assert not world.allowed("cathy", "memory_store.get", T, "corp.support.mem")
    assert world.allowed("sam", "memory_store.delete", T, "corp.support.mem") is False  # no USE_CATALOG
    world.grant("sam", "corp", "USE_CATALOG")
    assert world.allowed("sam", "memory_store.delete", T, "corp.support.mem")
    assert not world.allowed("sam", "memory_store.get", T, "corp.support.mem")


def test_manage_grants_no_data_access(world):
    world.grant("mia", "corp", "USE_CATALOG")
    world.grant("mia", "corp", "USE_SCHEMA")
    world.grant("mia", "corp.support", "MANAGE")
    assert world.allowed("mia", "memory_store.delete", T, "corp.support.mem")
    assert world.allowed("mia", "permissions.update", T, "corp.support.mem")
    assert not world.allowed("mia", "memory_store.get", T, "corp.support.mem")
    assert world.allowed("mia", "memory_store.see", T, "corp.support.mem")


def test_grants_through_nested_groups(world):
    world.group("support_team", ["alice"])
    world.group("engineering", ["support_team"])
    world.group("everyone_corp", ["engineering"])
    world.grant("everyone_corp", "corp", "USE_CATALOG")
    world.grant("engineering", "corp.support", "USE_SCHEMA")
    world.grant("support_team", "corp.support", "READ_MEMORY_STORE")
    decision = world.authorizer.authorize(
        Principal("alice"), action("memory_store.get"), world.securable(T, "corp.support.mem")
    )
    assert decision.allowed
    assert decision.reason == "READ_MEMORY_STORE on schema corp.support via group support_team"
    assert not world.allowed("bob", "memory_store.get", T, "corp.support.mem")


def test_account_users_holds_every_principal(world):
    world.grant(ACCOUNT_USERS, "other", "USE_CATALOG")
    assert world.allowed("anyone-at-all", "catalog.get", C, "other")
    assert not world.allowed("anyone-at-all", "catalog.get", C, "corp")


def test_groups_may_own(world):
    world.group("owners", ["olga"])
    world.add(T, "corp.support.shared", owner="owners")
    assert world.allowed("olga", "memory_store.get", T, "corp.support.shared")
    assert not world.allowed("olga", "memory_store.get", T, "corp.support.mem")


def test_metastore_privileges(world):
    assert not world.allowed("carl", "catalog.create", M, "ms")
    world.grant("carl", "ms", "CREATE_CATALOG")
    assert world.allowed("carl", "catalog.create", M, "ms")
    assert not world.allowed("carl", "groups.manage", M, "ms")


def test_denials_say_what_is_missing(world):
    world.grant("alice", "corp", "USE_CATALOG")
    world.grant("alice", "corp", "USE_SCHEMA")
    decision = world.authorizer.authorize(
        Principal("alice"), action("memory_store.update"), world.securable(T, "corp.support.mem")
    )
    assert not decision.allowed and decision.reason == "requires MANAGE on memory store corp.support.mem"


def test_the_reason_of_a_decision_names_the_object_asked_about(world):
    """Two missing objects asked about in turn: each decision's reason names its own (a cached
    decision's reason is never another object's)."""
    for name in ("absent-one", "absent-two", "absent-one"):
        decision = world.authorizer.authorize(
            Principal("alice"), action("catalog.get"), world.securable(C, name)
        )
        assert decision.reason == f"catalog {name} does not exist", decision.reason
    for name in ("absent.x.one", "absent.x.two"):
        decision = world.authorizer.authorize(
            Principal("alice"), action("memory_store.get"), world.securable(T, name)
        )
        assert not decision.allowed and "absent" in decision.reason, decision.reason


def test_grantable_table_matches_the_contract():
    assert GRANTABLE[M] == ("CREATE_CATALOG", "READ_AUDIT")
    assert "USE_CATALOG" not in GRANTABLE[S] and "USE_SCHEMA" in GRANTABLE[C]
    assert set(GRANTABLE[T]) == {"READ_MEMORY_STORE", "WRITE_MEMORY_STORE", "MANAGE", "ALL_PRIVILEGES"}


def test_every_action_is_documented():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "policies" / "README.md").read_text()
    for name in ACTIONS:
        assert f"`{name}`" in readme, f"action {name} is not documented in policies/README.md"


# --- differential test against the oracle --------------------------------------------------------

PRINCIPALS = ["u0", "u1", "u2", "root"]
GROUPS = ["g0", "g1", "g2", "g3"]
NAMESPACE = [
    (C, "c0"),
    (C, "c1"),
    (S, "c0.s0"),
    (S, "c0.s1"),
    (S, "c1.s0"),
    (T, "c0.s0.m0"),
    (T, "c0.s0.m1"),
    (T, "c0.s1.m0"),
    (T, "c1.s0.m0"),
]
MISSING = [(C, "cx"), (S, "c0.sx"), (S, "cx.s0"), (T, "c0.s0.mx"), (T, "c0.sx.m0")]
SUBJECTS = [*PRINCIPALS[:3], *GROUPS, ACCOUNT_USERS]


@st.composite
def worlds(draw):  # type: ignore[no-untyped-def]
    w = World()
    for securable_type, full_name in NAMESPACE:
        w.add(securable_type, full_name, owner=draw(st.sampled_from([*SUBJECTS, "root", "nobody"])))
    # groups nest only upwards (g_i inside g_j for i < j), so there is no cycle
    for j, group in enumerate(GROUPS):
        members = draw(st.lists(st.sampled_from(PRINCIPALS[:3] + GROUPS[:j]), max_size=3, unique=True))
        w.group(group, members)
    targets = [("ms", M), *[(name, t) for t, name in NAMESPACE]]
    for _ in range(draw(st.integers(0, 14))):
        where, securable_type = draw(st.sampled_from(targets))
        w.grant(draw(st.sampled_from(SUBJECTS)), where, draw(st.sampled_from(GRANTABLE[securable_type])))
    return w


QUERIES = [
    (name, act.on or t, full)
    for name, act in ACTIONS.items()
    for t, full in [*NAMESPACE, *MISSING, (M, "ms")]
    if (act.on or t) == t
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    world=worlds(), who=st.sampled_from(PRINCIPALS), queries=st.lists(st.sampled_from(QUERIES), max_size=25)
)
def test_authorize_matches_the_oracle(world, who, queries):
    for action_name, securable_type, full_name in queries:
        got = world.allowed(who, action_name, securable_type, full_name)
        want = world.oracle(who, action_name, securable_type, full_name)
        assert got == want, (who, action_name, full_name, sorted(world.grants))
