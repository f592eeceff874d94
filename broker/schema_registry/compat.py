"""Avro schema compatibility, as a schema registry checks it: can a reader schema read what a writer wrote?

The rules are Avro's schema resolution (the specification's "Schema Resolution"): the same primitive,
or a promotion (int to long, float or double; long to float or double; float to double; string and
bytes either way); records of the same name, where each reader field is in the writer (by name or
alias) and readable, or has a default; enums of the same name whose writer symbols the reader has (or
the reader has a default symbol); arrays and maps by their items and values; fixed of the same name and
size; a writer union whose every branch the reader reads; a reader union with a branch that reads the
writer. The registry's levels apply it between a new schema and the latest (or every) registered one:

    BACKWARD   the new schema reads data written with the latest     (reader = new)
    FORWARD    the latest reads data written with the new            (writer = new)
    FULL       both; the *_TRANSITIVE variants against every version, not only the latest; NONE: no check
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}  # fmt: skip
_NAMED = ("record", "error", "enum", "fixed")


class _Schema:
    """A parsed schema with its named types, so a reference by name resolves to its definition."""

    def __init__(self, text_or_obj: str | Any) -> None:
        self.root = json.loads(text_or_obj) if isinstance(text_or_obj, str) else text_or_obj
        self.names: dict[str, dict] = {}
        self._collect(self.root, None)

    def _collect(self, s: Any, namespace: str | None) -> None:
        if isinstance(s, list):
            for branch in s:
                self._collect(branch, namespace)
        elif isinstance(s, dict):
            t = s.get("type")
            if t in _NAMED:
                full = _full_name(s, namespace)
                self.names[full] = s
                self.names.setdefault(full.rsplit(".", 1)[-1], s)
                namespace = full.rpartition(".")[0] or None
            if t in ("record", "error"):
                for f in s.get("fields", []):
                    self._collect(f.get("type"), namespace)
            elif t == "array":
                self._collect(s.get("items"), namespace)
            elif t == "map":
                self._collect(s.get("values"), namespace)
            elif isinstance(t, dict | list):
                self._collect(t, namespace)

    def resolve(self, s: Any) -> Any:
        """A schema with a name reference replaced by its definition and `{"type": "int", ...}` by `"int"`
        (a logical type reads as its underlying type); a union stays a list."""
        for _ in range(64):
            if isinstance(s, str):
                if s in PRIMITIVES or s not in self.names:
                    return s
                s = self.names[s]
            elif isinstance(s, dict):
                t = s.get("type")
                if isinstance(t, dict | list):
                    s = t
                elif t in PRIMITIVES:
                    return t
                elif t in (*_NAMED, "array", "map") or not isinstance(t, str) or t not in self.names:
                    return s
                else:
                    s = self.names[t]
            else:
                return s
        return s


def _full_name(s: dict, namespace: str | None) -> str:
    name = s.get("name", "")
    if "." in name:
        return name
    ns = s.get("namespace", namespace)
    return f"{ns}.{name}" if ns else name


def _kind(s: Any) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, str):
        return s
    t = s.get("type")
    return "record" if t == "error" else t


def _short(s: dict) -> str:
    return s.get("name", "").rsplit(".", 1)[-1]


def reader_problems(reader: str | Any, writer: str | Any) -> list[str]:
    """Why `reader` cannot read what `writer` wrote (empty: it can)."""
    r, w = _Schema(reader), _Schema(writer)
    problems: list[str] = []
    _check(r, r.resolve(r.root), w, w.resolve(w.root), "", problems, set())
    return problems


def _check(rs: _Schema, r: Any, ws: _Schema, w: Any, path: str, out: list[str], seen: set) -> None:
    rk, wk = _kind(r), _kind(w)
    where = path or "/"
    if wk == "union":
        for i, branch in enumerate(w):
            branch = ws.resolve(branch)
            if rk == "union":
                if not any(not _problems(rs, rs.resolve(b), ws, branch, seen) for b in r):
                    out.append(f"{where}: the reader's union has no branch for the writer's {_kind(branch)} "
                               f"(branch {i})")  # fmt: skip
            else:
                _check(rs, r, ws, branch, path, out, seen)
        return
    if rk == "union":
        if not any(not _problems(rs, rs.resolve(b), ws, w, seen) for b in r):
            out.append(f"{where}: the reader's union has no branch for the writer's {wk}")
        return
    if wk in PRIMITIVES or rk in PRIMITIVES:
        if rk != wk and rk not in _PROMOTIONS.get(wk, ()):
            out.append(f"{where}: the writer's {wk} cannot be read as {rk}")
        return
    if rk != wk:
        out.append(f"{where}: the writer's {wk} cannot be read as {rk}")
        return
    if rk in ("record", "enum", "fixed") and _short(r) != _short(w) and _short(w) not in r.get("aliases", []):
        out.append(f"{where}: the writer's {wk} {w.get('name')} is not the reader's {r.get('name')}")
        return
    if rk == "record":
        key = (id(r), id(w))
        if key in seen:
            return  # a recursive type: checked where it began
        seen = seen | {key}
        by_name = {f["name"]: f for f in w.get("fields", [])}
        for f in r.get("fields", []):
            wf = by_name.get(f["name"]) or next((by_name[a] for a in f.get("aliases", []) if a in by_name), None)
            if wf is None:
                if "default" not in f:
                    out.append(f"{path}/{f['name']}: the reader's field has no default and the writer has no such "
                               "field")  # fmt: skip
                continue
            _check(rs, rs.resolve(f["type"]), ws, ws.resolve(wf["type"]), f"{path}/{f['name']}", out, seen)
    elif rk == "enum":
        missing = [s for s in w.get("symbols", []) if s not in r.get("symbols", [])]
        if missing and "default" not in r:
            out.append(f"{where}: the reader's enum {r.get('name')} lacks the writer's symbol(s) {', '.join(missing)}")
    elif rk == "fixed":
        if r.get("size") != w.get("size"):
            out.append(f"{where}: fixed {r.get('name')} is {r.get('size')} bytes, the writer's {w.get('size')}")
    elif rk == "array":
        _check(rs, rs.resolve(r.get("items")), ws, ws.resolve(w.get("items")), f"{path}/items", out, seen)
    elif rk == "map":
        _check(rs, rs.resolve(r.get("values")), ws, ws.resolve(w.get("values")), f"{path}/values", out, seen)


def _problems(rs: _Schema, r: Any, ws: _Schema, w: Any, seen: set) -> list[str]:
    out: list[str] = []
    _check(rs, r, ws, w, "", out, seen)
    return out


def incompatibilities(level: str, new: str, registered: Iterable[str]) -> list[str]:
    """Why `new` breaks `level` against the registered schemas (oldest first; empty: it does not)."""
    level = level.upper()
    if level not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}")
    olds = list(registered)
    if level == "NONE" or not olds:
        return []
    against = olds if level.endswith("_TRANSITIVE") else olds[-1:]
    out = []
    for old in against:
        if level.startswith(("BACKWARD", "FULL")):
            out += [f"reading data of an earlier schema: {p}" for p in reader_problems(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            out += [f"an earlier schema reading the new one's data: {p}" for p in reader_problems(old, new)]
    return out
