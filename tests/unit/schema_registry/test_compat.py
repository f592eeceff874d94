"""Avro schema resolution as the registry's compatibility levels apply it."""

from __future__ import annotations

import json

import pytest

from broker.schema_registry.compat import incompatibilities, reader_problems


def rec(*fields: dict, name: str = "R") -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


@pytest.mark.parametrize(("writer", "reader", "ok"), [
    ('"int"', '"long"', True), ('"int"', '"double"', True), ('"long"', '"float"', True),
    ('"float"', '"double"', True), ('"string"', '"bytes"', True), ('"bytes"', '"string"', True),
    ('"long"', '"int"', False), ('"double"', '"float"', False), ('"string"', '"int"', False),
    ('"string"', '["null", "string"]', True), ('["null", "string"]', '"string"', False),
    ('["int", "string"]', '["long", "string", "null"]', True), ('["int", "boolean"]', '["long", "string"]', False),
    ('{"type": "int", "logicalType": "date"}', '"int"', True),
    ('{"type": "array", "items": "int"}', '{"type": "array", "items": "long"}', True),
    ('{"type": "map", "values": "long"}', '{"type": "map", "values": "int"}', False),
    ('{"type": "enum", "name": "E", "symbols": ["A", "B"]}', '{"type": "enum", "name": "E", "symbols": ["A"]}', False),
    ('{"type": "enum", "name": "E", "symbols": ["A", "B"]}',
     '{"type": "enum", "name": "E", "symbols": ["A"], "default": "A"}', True),
    ('{"type": "fixed", "name": "F", "size": 4}', '{"type": "fixed", "name": "F", "size": 8}', False),
    ('{"type": "fixed", "name": "F", "size": 4}', '{"type": "fixed", "name": "G", "size": 4}', False),
])  # fmt: skip
def test_reader_and_writer(writer: str, reader: str, ok: bool) -> None:
    assert (not reader_problems(reader, writer)) is ok, reader_problems(reader, writer)


def test_records_match_fields_by_name_alias_or_default() -> None:
    writer = rec({"name": "a", "type": "int"}, {"name": "gone", "type": "string"})
    assert not reader_problems(rec({"name": "a", "type": "long"}, {"name": "b", "type": "int", "default": 1}), writer)
    assert not reader_problems(rec({"name": "renamed", "aliases": ["a"], "type": "int"}), writer)
    problems = reader_problems(rec({"name": "a", "type": "int"}, {"name": "b", "type": "int"}), writer)
    assert problems == ["/b: the reader's field has no default and the writer has no such field"]
    assert reader_problems(rec({"name": "a", "type": "int"}, name="Other"), writer)


def test_a_recursive_type_and_a_named_reference_resolve() -> None:
    node = rec({"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}, name="Node")
    wider = rec({"name": "v", "type": "long"}, {"name": "next", "type": ["null", "Node"]}, name="Node")
    assert not reader_problems(wider, node)
    assert reader_problems(node, wider)  # long cannot be read as int, down the chain too


def test_levels_against_the_latest_or_every_version() -> None:
    v1 = rec({"name": "a", "type": "int"})
    v2 = rec({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0})
    v3 = rec({"name": "b", "type": "int", "default": 0})  # reads v2's data, not v1's ("a" has no default... in v1)
    assert incompatibilities("BACKWARD", v2, [v1]) == []
    assert incompatibilities("FORWARD", v2, [v1]) == []
    assert incompatibilities("FULL", v2, [v1]) == []
    assert incompatibilities("BACKWARD", v3, [v1, v2]) == []
    assert incompatibilities("FORWARD", v3, [v1, v2])  # v2 needs "a", which v3 does not write
    assert incompatibilities("NONE", '"string"', [v1]) == []
    assert incompatibilities("BACKWARD", '"string"', []) == []
    with pytest.raises(ValueError):
        incompatibilities("SIDEWAYS", v1, [v1])


def test_transitive_levels_check_every_version() -> None:
    v1 = rec({"name": "a", "type": "int"})
    v2 = rec({"name": "a", "type": "int", "default": 0})
    v3 = rec({"name": "a", "type": "string", "default": ""})
    assert incompatibilities("BACKWARD", v3, [v1, v2])  # int cannot be read as string
    v3b = rec({"name": "a", "type": "long", "default": 0})
    assert incompatibilities("BACKWARD", v3b, [v1, v2]) == []
    v4 = rec()  # reads anything (no fields)
    assert incompatibilities("FORWARD_TRANSITIVE", v4, [v1, v2]) != []  # v1 needs "a" with no default
    assert incompatibilities("FORWARD", v4, [v1, v2]) == []  # v2 has a default
