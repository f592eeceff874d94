"""`kafkactl user`: SCRAM credentials in ZooKeeper — add (or change a password), delete, list — written as
`kafka-configs.sh --zookeeper ... --entity-type users --alter --add-config 'SCRAM-SHA-256=[...]'` does, so
Apache Kafka's brokers read them too. A password is never echoed."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from broker.errors import UsageError
from broker.security import credentials
from broker.security.scram import MECHANISMS, MIN_ITERATIONS, ScramError, make_credential
from broker.zk import client as zkclient
from kafkactl import contexts
from kafkactl.render import Output, json_line, table

app = typer.Typer(help="SCRAM users (SASL SCRAM-SHA-256/512 credentials kept in ZooKeeper).", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="The user name (the principal User:NAME).")]
MechanismOpt = Annotated[
    list[str] | None,
    typer.Option("--mechanism", "-m", help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default: both).",
                 show_default=False),
]  # fmt: skip


def _mechanisms(given: list[str] | None) -> list[str]:
    out = []
    for m in given or list(MECHANISMS):
        name = m.strip().upper()
        if name not in MECHANISMS:
            raise UsageError(f"--mechanism {m!r}: expected {' or '.join(MECHANISMS)}")
        out.append(name)
    return list(dict.fromkeys(out))


def _password(password: str | None, from_stdin: bool) -> str:
    """The password from --password, stdin (one line), or a hidden prompt at a terminal."""
    if password is not None and from_stdin:
        raise UsageError("--password and --password-stdin exclude each other")
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif password is None:
        if not sys.stdin.isatty():
            raise UsageError("give --password or --password-stdin (no terminal to ask at)")
        password = typer.prompt("password", hide_input=True, confirmation_prompt=True, err=True)
    if not password:
        raise UsageError("the password must not be empty")
    return password


@app.command("add")
def add(
    name: NameArg,
    password: Annotated[
        str | None,
        typer.Option("--password", help="The password (visible to ps: prefer --password-stdin).", show_default=False),
    ] = None,  # fmt: skip
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
    mechanism: MechanismOpt = None,
    iterations: Annotated[int, typer.Option("--iterations", help="PBKDF2 iterations (4096-16384).")] = MIN_ITERATIONS,
    zookeeper: contexts.ZooKeeper = None,
) -> None:
    """Add a user, or set a new password for one (its other mechanisms are kept). Brokers check it at the
    user's next login."""
    if not name:
        raise UsageError("a user name must not be empty")
    mechanisms = _mechanisms(mechanism)
    secret = _password(password, password_stdin)
    try:
        creds = {m: make_credential(m, secret, iterations) for m in mechanisms}
    except ScramError as exc:
        raise UsageError(f"--iterations: {exc}") from None
    with zkclient.session(contexts.zookeeper(zookeeper)) as zk:
        existed = bool(credentials.read_user(zk, name))
        credentials.write_user(zk, name, creds)
    print(f"user {name} {'updated' if existed else 'added'} ({', '.join(mechanisms)}, {iterations} iterations)")


@app.command("delete")
def delete(name: NameArg, mechanism: MechanismOpt = None, zookeeper: contexts.ZooKeeper = None) -> None:
    """Delete a user's SCRAM credentials (of --mechanism only, or all): it cannot log in with them again."""
    mechanisms = _mechanisms(mechanism)
    with zkclient.session(contexts.zookeeper(zookeeper)) as zk:
        if not credentials.delete_user(zk, name, mechanisms):
            raise UsageError(f"no user {name!r} with {' or '.join(mechanisms)} credentials")
    print(f"user {name}: {', '.join(mechanisms)} credentials deleted")


@app.command("list")
def list_(
    zookeeper: contexts.ZooKeeper = None,
    output: Annotated[Output, typer.Option("-o", "--output", help="text or json.")] = Output.text,
) -> None:
    """Every user with SCRAM credentials: its mechanisms and their iterations (never a salt or key)."""
    with zkclient.session(contexts.zookeeper(zookeeper)) as zk:
        users = {name: credentials.read_user(zk, name) for name in credentials.list_users(zk)}
    if output == Output.json:
        for name, creds in users.items():
            json_line({"user": name, "mechanisms": {m: {"iterations": c.iterations} for m, c in sorted(creds.items())}})
        return
    table(["USER", "MECHANISMS", "ITERATIONS"],
          [(name, ", ".join(sorted(creds)), ", ".join(str(creds[m].iterations) for m in sorted(creds)))
           for name, creds in users.items()])  # fmt: skip
