"""`kafkactl txn`: the transactions the brokers' transaction coordinators hold (KIP-98), as Kafka's
`kafka-transactions.sh list|describe` shows them. Through ListTransactions (asked of every live broker) and
DescribeTransactions (asked of the transactional id's coordinator)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from broker.client.admin import Admin
from broker.client.txn_admin import describe_transaction, list_transactions
from kafkactl import completion, contexts
from kafkactl.render import Output, json_line, table

app = typer.Typer(help="Transactions: list the transactional ids, describe one.", no_args_is_help=True)

OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="text or json.")]


@app.command("list")
def list_(
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            help="Only ids in this state (Empty, Ongoing, "
            "PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort); "
            "repeatable.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    producer_id: Annotated[
        list[int] | None, typer.Option("--producer-id", help="Only this producer id; repeatable.", show_default=False)
    ] = None,  # fmt: skip
    output: OutputOpt = Output.text,
    bootstrap: contexts.Bootstrap = None,
) -> None:
    """Every transactional id with its coordinator, producer id and state."""
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        rows = list_transactions(admin, state or [], producer_id or [])
    if output == Output.json:
        for r in rows:
            json_line({"transactional_id": r.transactional_id, "coordinator": r.coordinator,
                       "producer_id": r.producer_id, "state": r.state})  # fmt: skip
        return
    table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
          [(r.transactional_id, r.coordinator, r.producer_id, r.state) for r in rows])  # fmt: skip


@app.command("describe")
def describe(
    txn_id: Annotated[
        str,
        typer.Argument(
            metavar="TXN_ID",
            help="The transactional id.",
            show_default=False,
            autocompletion=completion.transactional_ids,
        ),
    ],
    output: OutputOpt = Output.text,
    bootstrap: contexts.Bootstrap = None,
) -> None:
    """One transactional id: its coordinator, producer id and epoch, state, timeout, and the partitions of the
    transaction under way."""
    with Admin(contexts.bootstrap(bootstrap)) as admin:
        d = describe_transaction(admin, txn_id)
    if output == Output.json:
        json_line(d.as_json())
        return
    started = (datetime.fromtimestamp(d.start_time_ms / 1000, UTC).isoformat(timespec="milliseconds")
               if d.start_time_ms >= 0 else "-")  # fmt: skip
    table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS", "STARTED", "PARTITIONS"],
          [(d.transactional_id, d.coordinator, d.producer_id, d.producer_epoch, d.state, d.timeout_ms, started,
            ",".join(f"{t}-{p}" for t, p in d.partitions) or "-")])  # fmt: skip
