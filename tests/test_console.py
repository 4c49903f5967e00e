"""The web console in a real browser: Debian's headless Chromium, driven by selenium through the
system's chromedriver, against `catalog serve`. Each test signs in afresh (one browser and one
server for the module) and saves a screenshot of every page it checks under its tmp_path.

Without /usr/bin/chromium and /usr/bin/chromedriver the tests are skipped (install the Debian
packages chromium and chromium-driver; .ci/run does). `CONSOLE_README_SCREENSHOT=docs/console-store.png`
also writes the store page's screenshot there (the README's picture).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from itertools import pairwise
from pathlib import Path

import httpx
import pytest
from console_api import Api
from rest import UC

from catalog.auth import mint_dev_token
from catalog.settings import Settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
COOKIE = "catalog_console"


@pytest.fixture(scope="module", autouse=True)
def chromium_present() -> None:
    """First of all: without a browser there is nothing to drive (no server is started either)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.skip(
            f"no browser for the console tests ({', '.join(missing)} missing): "
            "install chromium and chromium-driver (apt-get install chromium chromium-driver) to run them"
        )


def token_for(live, who: str) -> str:  # type: ignore[no-untyped-def]
    return mint_dev_token(Settings(data_dir=live.data_dir), who)


@pytest.fixture(scope="module")
def api(live):
    with httpx.Client(base_url=live.url, timeout=60) as http:
        yield Api(http, lambda who: {"Authorization": f"Bearer {token_for(live, who)}"})


@pytest.fixture(scope="module")
def world(api):
    """What the pages show: a store with entries (one derived from another) and a grant; a group
    holding READ on the schema; a store only the admin may see; one bob may read; a store for the
    grants form. Bob's REST read of the private store is a denied audit event."""
    store = api.create_store("support_memory", description="What the support agent learned")
    api.write(store, "user-123", "/memories/preferences.md", "Prefers email over phone calls.",
              description="Communication preferences")  # fmt: skip
    api.write(store, "user-123", "/memories/trip.md", "Travelling to Lisbon in May with two children.")
    api.write(
        store,
        "user-123",
        "/memories/summary.md",
        "Contact by email; plans a family trip in May.",
        derived_from=[(store, "user-123", "/memories/preferences.md")],
    )
    api.grant("memory_store", store, "analysts", "READ_MEMORY_STORE")
    api.create_group("readers", ["dave"])
    api.grant("schema", "main.default", "readers", "READ_MEMORY_STORE")
    private = api.create_store("private_notes")
    shared = api.create_store("shared_notes")
    api.grant("memory_store", shared, "bob", "READ_MEMORY_STORE")
    assert api.get_store_as("bob", private).status_code == 403
    grants = api.create_store("team_memory", description="Where the support team keeps shared knowledge")
    return {"store": store, "private": private, "shared": shared, "grants": grants}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tmp_path_factory.mktemp("chromium-profile")
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1280,1000",
    ):
        options.add_argument(argument)
    # every request the browser makes (to check that no URL ever carries the token)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    # the system's chromedriver: selenium-manager never looks for (or downloads) another
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


class Web:
    """The browser on the live server, for one test."""

    def __init__(self, driver, base: str, shots: Path) -> None:  # type: ignore[no-untyped-def]
        self.driver = driver
        self.base = base
        self.shots = shots

    def go(self, path: str) -> None:
        self.driver.get(self.base + path)

    def css(self, selector: str):  # type: ignore[no-untyped-def]
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str):  # type: ignore[no-untyped-def]
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def link(self, text: str):  # type: ignore[no-untyped-def]
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.LINK_TEXT, text)

    def h1(self) -> str:
        return self.css("h1").text

    def path(self) -> str:
        return self.driver.current_url.removeprefix(self.base)

    def submit_with(self, action) -> None:  # type: ignore[no-untyped-def]
        """Do what submits a form or follows a link (a key, a click), and wait for the next page.
        The old page is gone when its root is stale, or when the browser says its node no longer
        belongs to the document (what Chrome answers instead, now and then, while the next page
        replaces it: seen in a full run)."""
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.css("html")
        action()

        def replaced(_: object) -> bool:
            try:
                old.is_enabled()
            except StaleElementReferenceException:
                return True
            except WebDriverException as exc:
                if "does not belong to the document" not in str(exc):
                    raise
                return True
            return False

        WebDriverWait(self.driver, 60).until(replaced)
        WebDriverWait(self.driver, 60).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )

    def click_through(self, selector: str) -> None:
        """Click what `selector` finds and wait for the next page. The element is found when it is
        clicked, and found again when the page replaced it meanwhile (a full run saw a node leave
        the document between finding and clicking)."""
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

        def click() -> None:
            for attempt in range(5):
                try:
                    self.css(selector).click()
                    return
                except WebDriverException as exc:
                    replaced = isinstance(exc, StaleElementReferenceException) or (
                        "does not belong to the document" in str(exc)
                    )
                    if not replaced or attempt == 4:
                        raise
                    time.sleep(0.1)

        self.submit_with(click)

    def press_enter(self, element) -> None:  # type: ignore[no-untyped-def]
        from selenium.webdriver.common.keys import Keys

        self.submit_with(lambda: element.send_keys(Keys.ENTER))

    def sign_in(self, token: str) -> None:
        self.go("/console/sign-in")
        field = self.css("#token")
        field.send_keys(token)
        self.press_enter(field)
        assert self.css("#signed-in-as").text, self.driver.page_source[-1000:]

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), name
        return path

    def requested_urls(self) -> list[str]:
        """Every URL the browser asked for (or was redirected to) since the last call."""
        urls = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                params = message["params"]
                urls.append(params["request"]["url"])
                urls.append(params.get("documentURL", ""))
                redirect = params.get("redirectResponse") or {}
                urls.append((redirect.get("headers") or {}).get("location", ""))
        return [u for u in urls if u]


@pytest.fixture
def web(browser, live, world, tmp_path) -> Web:
    """The module's browser with no cookie of the console (signed out), for this test."""
    page = Web(browser, live.url, tmp_path)
    page.go("/console/sign-in")
    browser.delete_all_cookies()
    browser.get_log("performance")  # forget earlier tests' requests
    return page


def test_sign_in_keeps_the_token_out_of_every_url_and_the_cookie_from_scripts(web, live, world):
    token = token_for(live, "admin")
    web.go(f"/console/stores/{world['store']}")
    assert web.path() == f"/console/sign-in?next=%2Fconsole%2Fstores%2F{world['store']}"
    assert web.h1() == "Sign in"
    assert web.css("label[for=token]").text == "Token"
    web.shot("sign-in")
    field = web.css("#token")
    field.send_keys(token)
    web.press_enter(field)
    assert web.path() == f"/console/stores/{world['store']}"  # back where it was going
    assert web.css("#signed-in-as").text == "admin"
    cookie = web.driver.get_cookie(COOKIE)
    assert cookie is not None
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"], cookie["secure"]) == (
        True,
        "Strict",
        "/console",
        False,
    )
    assert COOKIE not in web.driver.execute_script("return document.cookie")
    web.shot("signed-in")
    urls = web.requested_urls()
    assert any("/console/sign-in" in u for u in urls) and any(u.endswith(world["store"]) for u in urls)
    assert [u for u in urls if token[:40] in u or "token=" in u] == []


def test_browse_from_catalogs_to_a_store(web, live, world):
    web.sign_in(token_for(live, "admin"))
    web.go("/console/")
    assert web.h1() == "Catalogs"
    web.shot("catalogs")
    web.submit_with(web.link("main").click)
    assert web.h1() == "Catalog main"
    assert "default" in [a.text for a in web.all("#schemas th a")]
    web.shot("catalog")
    web.submit_with(web.link("default").click)
    assert web.h1() == "Schema main.default"
    stores = [a.text for a in web.all("#stores th a")]
    assert {"support_memory", "private_notes", "shared_notes"} <= set(stores)
    web.shot("schema")
    web.submit_with(web.link("support_memory").click)
    assert web.h1() == "Memory store main.default.support_memory"
    assert "What the support agent learned" in web.css("#store-facts").text
    crumbs = [a.text for a in web.all("nav[aria-label=Breadcrumb] a")]
    assert crumbs == ["Catalogs", "main", "default", "support_memory"]
    web.shot("store")


def grantees(web) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The grants table of the page: principal → the text of its privileges."""
    return {r.find_element("css selector", "th").text: r.text for r in web.all("#grants-table tbody tr")}


def test_grant_a_group_read_access_and_revoke_it_with_the_forms(web, live, world, api):
    from selenium.webdriver.support.ui import Select

    store = world["grants"]
    web.sign_in(token_for(live, "admin"))
    web.go(f"/console/stores/{store}")
    assert "support_team" not in grantees(web)
    principal = web.css("#grant-principal")
    assert web.css("label[for=grant-principal]").text == "Principal or group"
    principal.send_keys("support_team")
    Select(web.css("#grant-privilege")).select_by_visible_text("READ_MEMORY_STORE")
    web.press_enter(principal)  # the keyboard submits the form
    assert web.path() == f"/console/stores/{store}?done=granted#grants"
    assert web.css("#grants [role=status]").text == "The privilege was granted."
    assert "READ_MEMORY_STORE" in grantees(web)["support_team"]
    assert api.grants("memory_store", store)["support_team"] == ["READ_MEMORY_STORE"]
    web.shot("grant-added")
    web.click_through("button[aria-label='Revoke READ_MEMORY_STORE from support_team']")
    assert web.css("#grants [role=status]").text == "The privilege was revoked."
    assert "support_team" not in grantees(web)
    assert "support_team" not in api.grants("memory_store", store)
    web.shot("grant-removed")


def test_limit_a_grant_to_scopes_and_take_one_away_with_the_forms(web, live, world, api):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    store = world["grants"]
    web.sign_in(token_for(live, "admin"))
    web.go(f"/console/stores/{store}")
    web.css("#grant-principal").send_keys("scoped_team")
    Select(web.css("#grant-privilege")).select_by_visible_text("READ_MEMORY_STORE")
    scopes = web.css("#grant-scopes")
    assert web.css("label[for=grant-scopes]").text == "Only in scopes (optional)"
    scopes.send_keys("team-a", Keys.ENTER, "team-a:*")  # Enter in the box is a new line, not a submit
    assert web.path() == f"/console/stores/{store}"
    web.click_through("#grant-form button[type=submit]")
    assert web.path() == f"/console/stores/{store}?done=limited#grants"
    assert web.css("#grants [role=status]").text == "The privilege was granted in the scopes given."
    patterns = "#grants-table ul[aria-label='Scopes of READ_MEMORY_STORE for scoped_team'] code"
    assert [c.text for c in web.all(patterns)] == ["team-a", "team-a:*"]
    (granted,) = api.client().grants.get("memory_store", store, principal="scoped_team")
    assert granted.scopes == {"READ_MEMORY_STORE": ["team-a", "team-a:*"]}
    web.shot("grant-limited")
    web.click_through("button[aria-label='Remove scope team-a:* from READ_MEMORY_STORE of scoped_team']")
    assert web.css("#grants [role=status]").text == "The scopes were taken from the grant."
    assert [c.text for c in web.all(patterns)] == ["team-a"]
    assert api.client().grants.get("memory_store", store, principal="scoped_team")[0].scopes == {
        "READ_MEMORY_STORE": ["team-a"]
    }
    web.click_through("button[aria-label='Revoke READ_MEMORY_STORE from scoped_team']")
    assert "scoped_team" not in grantees(web)


def test_the_browsers_icon_requests_are_answered_and_never_denied(web, live, world, api):
    """A console session in a real browser: the icon the pages name is fetched without a token
    or cookie, and none of the session's requests is audited as denied or unauthenticated."""
    admin = api.client()
    mark = next(iter(admin.audit.events(limit=1))).seq
    web.driver.execute_cdp_cmd("Network.clearBrowserCache", {})  # the icon is asked for afresh
    web.sign_in(token_for(live, "admin"))
    for path in ("/console/", f"/console/stores/{world['store']}", "/console/audit"):
        web.go(path)
        icon = web.css("link[rel=icon]")
        assert icon.get_attribute("href") == f"{live.url}/favicon.ico"
        assert icon.get_attribute("type") == "image/svg+xml"
    assert any(u.endswith("/favicon.ico") for u in web.requested_urls())
    with httpx.Client(base_url=live.url) as anyone:
        answer = anyone.get("/favicon.ico")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("image/svg+xml")
    session = [e for e in admin.audit.events(limit=500) if e.seq > mark]
    assert session and {e.decision for e in session} == {"allow"}, [
        (e.action_name, e.decision, e.reason) for e in session if e.decision != "allow"
    ]
    assert [e for e in session if "favicon" in e.action_name] == []


def test_effective_privileges_say_where_each_comes_from(web, live, world):
    web.sign_in(token_for(live, "admin"))
    web.go(f"/console/stores/{world['store']}")
    field = web.css("#effective-principal")
    field.clear()
    field.send_keys("dave")
    web.press_enter(field)
    rows = [
        [cell.text for cell in row.find_elements("css selector", "th, td")]
        for row in web.all("#effective-table tbody tr")
    ]
    assert rows == [
        [
            "READ_MEMORY_STORE",
            "granted READ_MEMORY_STORE",
            "inherited from schema main.default",
            "readers",
            "every scope",
        ]
    ]
    assert "What dave may do" in web.css("#effective-table caption").text
    web.shot("effective-privileges")


def test_entries_by_scope_and_search(web, live, world):
    web.sign_in(token_for(live, "admin"))
    web.go(f"/console/stores/{world['store']}")
    scope = web.css("#entries-scope")
    scope.send_keys("user-123")
    web.press_enter(scope)
    listed = [th.text.split("\n")[0] for th in web.all("#entries-table tbody th")]
    assert listed == ["/memories/preferences.md", "/memories/summary.md", "/memories/trip.md"]
    web.shot("entries")
    query = web.css("#entries-query")
    query.send_keys("Lisbon")
    from selenium.webdriver.support.ui import Select

    Select(web.css("#entries-mode")).select_by_visible_text("keyword")
    web.press_enter(query)
    found = [th.text.split("\n")[0] for th in web.all("#entries-table tbody th")]
    assert found == ["/memories/trip.md"]
    assert "Keyword search for “Lisbon” in scope user-123" in web.css("#entries-table caption").text
    web.shot("entries-search")
    readme = os.environ.get("CONSOLE_README_SCREENSHOT")
    if readme:  # the README's picture: the store page with its grants, privileges and entries
        web.driver.set_window_size(1000, 1420)
        try:
            web.go(f"/console/stores/{world['store']}?scope=user-123")
            shutil.copyfile(web.shot("readme"), readme)
        finally:
            web.driver.set_window_size(1280, 1000)


def test_a_scope_the_store_refuses_is_said_inside_its_page(web, live, world, api):
    """On a store bound to end users, the admin types a user's scope: the page stays, and its
    entries panel says why (the admin's own scope is listed as usual)."""
    store = api.create_store("bound_to_users")
    api.client().memory_stores.update(store, scope_binding="end_user")
    web.sign_in(token_for(live, "admin"))
    web.go(f"/console/stores/{store}")
    scope = web.css("#entries-scope")
    scope.send_keys("user-123")
    web.press_enter(scope)
    assert web.h1() == f"Memory store {store}"
    refusal = web.css("#entries-refused").text
    assert "403 PERMISSION_DENIED" in refusal and "binds scopes to the end user" in refusal
    assert web.css("#entries-scope").get_attribute("value") == "user-123"
    assert web.all("#grants-table") or web.css("#grants")  # the rest of the page is there
    web.shot("entries-refused")
    scope = web.css("#entries-scope")
    scope.clear()
    scope.send_keys("admin")
    web.press_enter(scope)
    assert (
        web.all("#entries-refused") == [] and web.css("#entries-none").text == "Scope admin holds no entries."
    )


def test_the_api_explorer_renders_with_nothing_from_another_site(web, live, world):
    """/docs: Swagger UI, its files served by the server itself, lists the API's operations; the
    browser asks nothing of any other site."""
    from selenium.webdriver.support.ui import WebDriverWait

    web.go("/docs")
    WebDriverWait(web.driver, 60).until(lambda d: len(web.all(".opblock")) > 20)
    assert "Memory Catalog" in web.css(".info .title").text
    web.shot("api-explorer")
    urls = web.requested_urls()
    assert any(u.endswith("/docs/assets/swagger-ui-bundle.js") for u in urls)
    elsewhere = [u for u in urls if not u.startswith((live.url, "data:", "blob:", "about:"))]
    assert elsewhere == []


def test_audit_log_with_filters_and_its_chart(web, live, world):
    from selenium.webdriver.support.ui import Select

    web.sign_in(token_for(live, "admin"))
    web.go("/console/audit")
    assert web.h1() == "Audit log"
    chart = web.css("svg#audit-chart")
    assert chart.get_attribute("role") == "img"
    allowed = web.all("svg#audit-chart g[data-series=allowed] rect")
    denied = web.all("svg#audit-chart g[data-series=denied] rect")
    assert allowed and denied  # the setup's reads, and bob's refused one
    web.shot("audit")
    who = web.css("#audit-principal")
    who.send_keys("bob")
    Select(web.css("#audit-decision")).select_by_visible_text("deny")
    web.press_enter(who)
    decisions = [row.find_elements("css selector", "td")[4].text for row in web.all("#audit-events tbody tr")]
    assert decisions and set(decisions) == {"deny"}
    assert web.all("svg#audit-chart g[data-series=allowed] rect") == []
    assert web.all("svg#audit-chart g[data-series=denied] rect")
    assert ": 0 allowed," in web.css("#chart-summary").text
    web.shot("audit-filtered")


def test_lineage_is_drawn(web, live, world):
    web.sign_in(token_for(live, "admin"))
    web.go(f"/console/lineage/{world['store']}")
    assert web.h1() == f"Lineage of {world['store']}"
    nodes = web.all("svg#lineage-graph g.node")
    assert len(nodes) == 2 and len(web.all("svg#lineage-graph path.edge")) == 1
    labels = {n.find_element("css selector", "text.label").text for n in nodes}
    assert labels == {"user-123: /memories/preferences.md", "user-123: /memories/summary.md"}
    web.shot("lineage")


def test_a_non_admin_cannot_see_another_store(web, live, world, api):
    web.sign_in(token_for(live, "bob"))
    web.go("/console/schemas/main.default")
    stores = [a.text for a in web.all("#stores th a")]
    assert "shared_notes" in stores and "private_notes" not in stores
    web.shot("schema-as-bob")
    web.go(f"/console/stores/{world['private']}")
    assert web.h1() == "Not allowed"
    assert "403 PERMISSION_DENIED" in web.css("#error").text
    web.shot("refused")
    events = api.http.get(
        f"{UC}/system/audit",
        headers=api.headers("admin"),
        params={
            "principal": "bob",
            "securable_full_name": world["private"],
            "action_name": "memory_store.see",
        },
    ).json()["events"]
    assert events and (events[0]["decision"], events[0]["status_code"]) == ("deny", 403)


def test_sign_out(web, live, world):
    web.sign_in(token_for(live, "admin"))
    web.click_through("#sign-out")
    assert web.path() == "/console/sign-in?why=signed-out"
    assert web.css("[role=status]").text == "You are signed out."
    assert web.driver.get_cookie(COOKIE) is None
    web.go("/console/audit")
    assert web.path().startswith("/console/sign-in")
    web.shot("signed-out")


def test_keyboard_first_stop_is_the_skip_link_and_focus_is_visible(web, live, world):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    web.sign_in(token_for(live, "admin"))
    web.go(f"/console/stores/{world['store']}")
    ActionChains(web.driver).send_keys(Keys.TAB).perform()
    focused = web.driver.switch_to.active_element
    assert focused.text == "Skip to main content"
    assert focused.value_of_css_property("outline-style") == "solid"  # a visible focus ring
    focused.send_keys(Keys.ENTER)
    assert web.driver.switch_to.active_element.get_attribute("id") == "main"
    levels = [int(h.tag_name[1]) for h in web.all("h1, h2, h3")]
    assert levels[0] == 1 and all(b - a <= 1 for a, b in pairwise(levels))
    web.shot("keyboard")
