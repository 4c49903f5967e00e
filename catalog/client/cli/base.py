"""What every remote command shares (the rules are the package's, `catalog.client.cli`): the
remote options and `client_for`, dispatch with its one-line failures (`run`, `fail`), lists read
over several pages, and the output of one object or a list (plain, or `--json`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from catalog.client.errors import CatalogError
from catalog.client.output import Progress, print_raw, table

if TYPE_CHECKING:
    from catalog.client import Call, Client


Handler = Callable[[argparse.Namespace], int]


SCOPE_HELP = {
    "add": "limit READ_MEMORY_STORE or WRITE_MEMORY_STORE to a scope (team-a) or a prefix ending in * "
    "(team-a:*), added to the patterns of a grant already limited; repeat it (at most 20). Without it, "
    "the privileges hold in every scope",
    "remove": "take this pattern from a grant limited to scopes (the grant goes with its last one) "
    "instead of revoking the privilege; repeat it",
}


SECURABLE_TYPES = ("metastore", "catalog", "schema", "memory_store")


DEFAULT_EVENTS = 50


# --- options and dispatch ------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """Refuses bad arguments in one line, `error: USAGE: ...`, and exit 1, like every other
    failure of the command (help is still `-h`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"error: USAGE: {message} (see: {self.prog} -h)\n")


def remote_options(*, suppress: bool) -> Parser:
    """`--url`, `--token`, `--json`. The main parser has them with their defaults; each remote
    subcommand has them too, defaulting to SUPPRESS, so that a value given after the subcommand
    wins and one given before it is not overwritten."""
    default: Any = argparse.SUPPRESS if suppress else None
    options = Parser(add_help=False)
    options.add_argument(
        "--url", default=default, help="the server (default: $CATALOG_URL, else http://127.0.0.1:8080)"
    )
    options.add_argument("--token", default=default, help="a bearer token (default: $CATALOG_TOKEN)")
    options.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="print the API's JSON answer unchanged",
    )
    return options


def wants_remote(args: argparse.Namespace) -> bool:
    """Whether `catalog audit verify` asks a server rather than reading the database itself: a
    server is named (`--url`, `--token`, CATALOG_URL or CATALOG_TOKEN) and no `--data-dir`."""
    if getattr(args, "data_dir", None):
        return False
    named = getattr(args, "url", None) or getattr(args, "token", None)
    return bool(named or os.environ.get("CATALOG_URL") or os.environ.get("CATALOG_TOKEN"))


def fail(code: str, message: str) -> int:
    print(f"error: {code}: {' '.join(str(message).split())}", file=sys.stderr)
    return 1


def run(handler: Handler, args: argparse.Namespace) -> int:
    """Run a remote command: every failure becomes one `error:` line and exit 1."""
    try:
        return handler(args)
    except CatalogError as exc:
        return fail(exc.error_code, exc.message)
    except (ValueError, TypeError) as exc:  # arguments the client refuses before sending them
        return fail("USAGE", str(exc))
    except BrokenPipeError:  # `catalog audit events | head`
        sys.stderr.close()
        return 0
    except Exception as exc:  # no trace for people; the message says what went wrong
        return fail("CLIENT_ERROR", f"{type(exc).__name__}: {exc}")


def client_for(args: argparse.Namespace) -> Client:
    from catalog.client import Client

    given = getattr(args, "token", None)
    if given is not None and not given.strip():
        # `--token "$ALICE"` with ALICE unset must not act as CATALOG_TOKEN's principal instead
        raise CatalogError(0, "USAGE", "--token is empty")
    token = given or os.environ.get("CATALOG_TOKEN")
    if not token:
        raise CatalogError(
            0,
            "UNAUTHENTICATED",
            "no token: pass --token or set CATALOG_TOKEN "
            "(a development server mints one: catalog token --sub NAME)",
        )
    return Client(getattr(args, "url", None) or None, token)


def wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def read_list(client: Client, call: Call, key: str, what: str, limit: int | None = None) -> list[Any]:
    """The items of a list, page after page (at most `limit`), as the server sent them."""
    progress = Progress(what)
    found: list[Any] = []
    try:
        for pages, page in enumerate(client.pages(call), start=1):
            found.extend(page.get(key) or [])
            progress.update(len(found), pages)
            if limit is not None and len(found) >= limit:
                del found[limit:]
                break
    finally:
        progress.done()
    return found


def show_list(
    args: argparse.Namespace,
    call: Call,
    key: str,
    what: str,
    columns: Sequence[tuple[str, Callable[[dict[str, Any]], Any]]],
    limit: int | None = None,
) -> int:
    with client_for(args) as client:
        found = read_list(client, call, key, what, limit)
    if wants_json(args):
        print_raw(json.dumps({key: found}))
    else:
        print(table([title for title, _ in columns], ([get(item) for _, get in columns] for item in found)))
    return 0


def show_one(args: argparse.Namespace, call: Call, describe: Callable[[dict[str, Any]], str]) -> int:
    with client_for(args) as client:
        response = client.send(call)
    if wants_json(args):
        print_raw(response.text)
    else:
        print(describe(response.json()))
    return 0
