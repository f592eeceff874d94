"""`kafkactl quota`: client quotas (produce and fetch byte rates, request percentage) of users and client ids.

Through the brokers' AlterClientQuotas and DescribeClientQuotas, as `kafka-configs.sh --bootstrap-server ...
--entity-type users|clients --alter --add-config producer_byte_rate=...` does; the brokers keep them in
ZooKeeper where Kafka does and enforce them (throttling the clients over their quota).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from broker.client.admin import Admin
from broker.errors import UsageError
from broker.protocol.messages.quotas import MATCH_DEFAULT, MATCH_EXACT
from broker.quota.store import CLIENT_ID, QUOTA_KEYS, USER
from kafkactl import contexts
from kafkactl.render import Output, json_line, table

app = typer.Typer(
    help="Client quotas of users and client ids: set, delete, list (producer_byte_rate, consumer_byte_rate, "
    "request_percentage).",
    no_args_is_help=True,
)

UserOpt = Annotated[str | None, typer.Option("--user", "-u", help="A user (principal User:NAME).", show_default=False)]
ClientOpt = Annotated[str | None, typer.Option("--client-id", "-c", help="A client id.", show_default=False)]
UserDefaultOpt = Annotated[bool, typer.Option("--user-default", help="The default user (every user without its own).")]
ClientDefaultOpt = Annotated[
    bool, typer.Option("--client-default", help="The default client id (every client id without its own).")
]
KEYS = ", ".join(QUOTA_KEYS)


def _entity(user: str | None, client_id: str | None, user_default: bool, client_default: bool) -> dict[str, str | None]:
    """The entity the options name: user and/or client id, a default as None."""
    if user is not None and user_default:
        raise UsageError("give --user or --user-default, not both")
    if client_id is not None and client_default:
        raise UsageError("give --client-id or --client-default, not both")
    for flag, name in (("--user", user), ("--client-id", client_id)):
        if name is not None and not name:
            raise UsageError(f"{flag} must not be empty (the default is --{flag[2:].split('-')[0]}-default)")
    entity: dict[str, str | None] = {}
    if user is not None or user_default:
        entity[USER] = user
    if client_id is not None or client_default:
        entity[CLIENT_ID] = client_id
    if not entity:
        raise UsageError("give --user, --user-default, --client-id or --client-default")
    return entity


def _key(key: str) -> str:
    key = key.strip()
    if key not in QUOTA_KEYS:
        raise UsageError(f"unknown quota {key!r} (valid: {KEYS})")
    return key


def _assignments(pairs: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq:
            raise UsageError(f"expected KEY=VALUE, got {pair!r}")
        key = _key(key)
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"{key}={text!r}: not a number") from None
        if not value > 0 or value == float("inf"):
            raise UsageError(f"{key}={text}: a quota must be a positive number")
        if QUOTA_KEYS[key] and value != int(value):
            raise UsageError(f"{key}={text}: a whole number of bytes per second")
        out[key] = value
    return out


@app.command("set")
def set_(
    assignments: Annotated[list[str], typer.Argument(help=f"KEY=VALUE pairs ({KEYS}).", show_default=False)],
    user: UserOpt = None,
    client_id: ClientOpt = None,
    user_default: UserDefaultOpt = False,
    client_default: ClientDefaultOpt = False,
    validate_only: Annotated[bool, typer.Option("--validate-only", help="Check only; change nothing.")] = False,
    bootstrap: contexts.Bootstrap = None,
) -> None:
    """Set quotas of a user, a client id, or a user's client id (other quotas of it are kept)."""
    entity = _entity(user, client_id, user_default, client_default)
    changes = _assignments(assignments)
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        admin.alter_client_quotas(entity, dict(changes), validate_only=validate_only)
    what = ", ".join(f"{k}={_number(v)}" for k, v in changes.items())
    print(f"{'valid' if validate_only else 'set'}: {_describe(entity)} {what}")


@app.command("delete")
def delete(
    keys: Annotated[list[str], typer.Argument(help=f"The quotas to remove ({KEYS}).", show_default=False)],
    user: UserOpt = None,
    client_id: ClientOpt = None,
    user_default: UserDefaultOpt = False,
    client_default: ClientDefaultOpt = False,
    bootstrap: contexts.Bootstrap = None,
) -> None:
    """Remove quotas of a user, a client id, or a user's client id."""
    entity = _entity(user, client_id, user_default, client_default)
    removed = list(dict.fromkeys(_key(k) for k in keys))
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        admin.alter_client_quotas(entity, dict.fromkeys(removed))
    print(f"deleted: {_describe(entity)} {', '.join(removed)}")


@app.command("list")
def list_(
    user: UserOpt = None,
    client_id: ClientOpt = None,
    user_default: UserDefaultOpt = False,
    client_default: ClientDefaultOpt = False,
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json.")] = Output.text,
    bootstrap: contexts.Bootstrap = None,
) -> None:
    """Quotas: every entity's, or those of the user and/or client id given (their per-client ones too)."""
    components: list[tuple[str, int, str | None]] = []
    for kind, name, default in ((USER, user, user_default), (CLIENT_ID, client_id, client_default)):
        if name is not None and default:
            raise UsageError(f"give --{kind} or --{kind.split('-')[0]}-default, not both")
        if name is not None:
            components.append((kind, MATCH_EXACT, name))
        elif default:
            components.append((kind, MATCH_DEFAULT, None))
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        found = admin.describe_client_quotas(components)
    rows = sorted(found, key=lambda item: (_sort_name(item[0], USER), _sort_name(item[0], CLIENT_ID)))
    if output == Output.json:
        for entity, values in rows:
            json_line({"user": _json_name(entity, USER), "client_id": _json_name(entity, CLIENT_ID),
                       "quotas": {k: _number(v) for k, v in sorted(values.items())}})  # fmt: skip
        return
    table(["USER", "CLIENT-ID", *QUOTA_KEYS.keys()],
          [(_text_name(e, USER), _text_name(e, CLIENT_ID), *(_number(v[k]) if k in v else "" for k in QUOTA_KEYS))
           for e, v in rows])  # fmt: skip


def _number(value: float) -> Any:
    return int(value) if value == int(value) else value


def _sort_name(entity: dict[str, str | None], kind: str) -> tuple[int, str]:
    if kind not in entity:
        return (0, "")
    name = entity[kind]
    return (1, "") if name is None else (2, name)


def _json_name(entity: dict[str, str | None], kind: str) -> str | None:
    if kind not in entity:
        return None
    return entity[kind] if entity[kind] is not None else "<default>"


def _text_name(entity: dict[str, str | None], kind: str) -> str:
    return _json_name(entity, kind) or ""


def _describe(entity: dict[str, str | None]) -> str:
    parts = []
    for kind in (USER, CLIENT_ID):
        if kind in entity:
            parts.append(f"{kind} {entity[kind]!r}" if entity[kind] is not None else f"default {kind}")
    return " / ".join(parts)
