"""Dynamic shell completion: topic names, group ids and transactional ids, asked of the cluster the command would use.

A completion must never hang a shell nor print an error into it: each lookup has a short timeout and
any failure completes nothing.
"""

from __future__ import annotations

import contextlib

import typer

from broker.client.admin import Admin
from broker.client.txn_admin import list_transactions
from kafkactl import contexts

TIMEOUT_S = 2.0


def _bootstrap(ctx: typer.Context) -> str:
    """-b of the command or of the root, else what the environment or context names."""
    for c in (ctx, ctx.find_root()):
        value = c.params.get("bootstrap")
        if value:
            return value
    return contexts.bootstrap()


def topics(ctx: typer.Context, incomplete: str) -> list[str]:
    with contextlib.suppress(Exception), Admin(_bootstrap(ctx), timeout=TIMEOUT_S) as admin:
        return [t for t in admin.list_topics() if t.startswith(incomplete)]
    return []


def groups(ctx: typer.Context, incomplete: str) -> list[str]:
    with contextlib.suppress(Exception), Admin(_bootstrap(ctx), timeout=TIMEOUT_S) as admin:
        return [g for g in admin.list_groups() if g.startswith(incomplete)]
    return []


def transactional_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """The transactional ids the coordinators hold (ListTransactions of every live broker)."""
    with contextlib.suppress(Exception), Admin(_bootstrap(ctx), timeout=TIMEOUT_S) as admin:
        return sorted(r.transactional_id for r in list_transactions(admin) if r.transactional_id.startswith(incomplete))
    return []
