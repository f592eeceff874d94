"""Imports run one way: the CLI calls `broker/`, never the reverse; the request handlers see their broker
only through `broker.server.services`, never `broker.server.broker` (which builds them); the lower layers
(records, log, protocol) never import the server, replication or the clients, and replication, the
coordinators and the quotas never import the server (they see it through Protocols of their own)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported(path: Path) -> set[str]:
    """Every module a file imports, at any depth (TYPE_CHECKING blocks and function bodies too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _modules_of(package: str) -> list[Path]:
    paths = sorted((ROOT / "broker" / package).rglob("*.py"))
    assert paths, package
    return paths


def _imports_any(path: Path, packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in imported(path) if any(m == p or m.startswith(p + ".") for p in packages))


def test_records_log_and_protocol_never_import_the_server_replication_or_the_clients():
    for package in ("records", "log", "protocol"):
        for path in _modules_of(package):
            bad = _imports_any(path, ("broker.server", "broker.replication", "broker.client"))
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_replication_never_imports_the_server():
    for path in _modules_of("replication"):
        bad = _imports_any(path, ("broker.server",))
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_the_coordinators_and_quotas_never_import_the_server():
    for path in _modules_of("coordinator") + _modules_of("quota"):
        bad = _imports_any(path, ("broker.server",))
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_no_two_modules_of_the_server_coordinators_quotas_log_or_replication_import_each_other():
    """(TYPE_CHECKING imports count: a pair leaning on each other is one concern split badly, or a missing
    lower layer.)"""
    paths = [p for package in ("server", "coordinator", "quota", "log", "replication") for p in _modules_of(package)]
    names = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in paths}
    deps = {n: {m for m in imported(p) if m in names and m != n} for n, p in names.items()}
    pairs = sorted({tuple(sorted((a, b))) for a in deps for b in deps[a] if a in deps[b]})
    assert not pairs, pairs


def test_the_request_handlers_never_import_the_broker_that_builds_them():
    handlers = sorted((ROOT / "broker" / "server" / "handlers").glob("*.py"))
    assert handlers
    for path in handlers:
        assert "broker.server.broker" not in imported(path), f"{path.name} imports broker.server.broker"


def test_the_core_package_never_imports_the_cli():
    for path in sorted((ROOT / "broker").rglob("*.py")):
        assert not any(m == "kafkactl" or m.startswith("kafkactl.") for m in imported(path)), path


def test_the_broker_provides_everything_the_handlers_interface_lists():
    from broker.server.broker import Broker
    from broker.server.services import Services

    source = (ROOT / "broker" / "server" / "broker.py").read_text()
    for name in Services.__annotations__:
        assert f"self.{name} = " in source or f"self.{name}: " in source, f"Broker has no attribute {name}"
    methods = [n for n, v in vars(Services).items() if callable(v) and not n.startswith("_")]
    assert len(methods) >= 10
    for name in methods:
        assert callable(getattr(Broker, name, None)), f"Broker has no method {name}"
