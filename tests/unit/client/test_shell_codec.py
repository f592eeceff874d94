"""The shell codec of produce / consume (broker.client.shell): JSON lines, text lines, format strings, decoders."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.client.consumer import ConsumerRecord
from broker.client.shell import (
    Message,
    compile_format,
    decode_bytes,
    iso_time,
    message_from_json,
    messages_from_lines,
    parse_header,
    record_json,
)
from broker.errors import UsageError

TS = 1_700_000_000_123


def rec(key=b"k", value=b"v", headers=(), partition=2, offset=17, ts=TS, topic="orders", tstype=0):
    return ConsumerRecord(topic, partition, offset, ts, key, value, tuple(headers), 0, tstype)


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# --- JSON lines: lossless round trip ---------------------------------------------------------------

maybe = st.none() | st.binary(max_size=40) | st.text(max_size=20).map(str.encode)
hdrs = st.lists(st.tuples(st.text(max_size=8), maybe), max_size=5)


@given(maybe, maybe, hdrs, st.integers(min_value=0, max_value=1000), st.integers(min_value=0, max_value=2**62))
def test_json_round_trip_is_lossless(key, value, headers, partition, ts):
    r = rec(key, value, headers, partition, 5, ts)
    line = dumps(record_json(r))
    assert "\n" not in line
    m = message_from_json(line, 1)
    assert (m.key, m.value, m.headers, m.partition, m.timestamp) == (key, value, list(headers), partition, ts)
    # and again through the line reader, exactly as `produce --input json` reads stdin
    (m2,) = messages_from_lines([line.encode() + b"\n"], input_format="json")
    assert (m2.key, m2.value, m2.headers, m2.partition, m2.timestamp, m2.line) == (
        key, value, list(headers), partition, ts, 1)  # fmt: skip


def test_record_json_shape():
    r = rec(b"\xff\x00", "päivä".encode(), [("a", None), ("a", b"1"), ("bin", b"\xfe")])
    assert record_json(r) == {
        "topic": "orders", "partition": 2, "offset": 17, "timestamp": TS,
        "key": base64.b64encode(b"\xff\x00").decode(), "key_encoding": "base64",
        "value": "päivä",
        "headers": [{"key": "a", "value": None}, {"key": "a", "value": "1"},
                    {"key": "bin", "value": base64.b64encode(b"\xfe").decode(), "encoding": "base64"}],
    }  # fmt: skip


def test_record_json_nulls_and_empties():
    obj = record_json(rec(None, None))
    assert obj["key"] is None and obj["value"] is None
    assert "key_encoding" not in obj and "value_encoding" not in obj
    assert record_json(rec(b"", b""))["value"] == ""
    assert record_json(rec(tstype=1))["timestamp_type"] == "LogAppendTime"
    assert "timestamp_type" not in record_json(rec())


def test_json_input_accepts_hex_and_inline_json_values():
    m = message_from_json('{"key": "00ff", "key_encoding": "hex", "value": {"a": [1, 2]}}', 4)
    assert m.key == b"\x00\xff"
    assert m.value == b'{"a":[1,2]}'
    assert m.partition is None and m.timestamp is None and m.headers == []
    assert m.line == 4


def test_json_input_header_pairs():
    m = message_from_json('{"value": "x", "headers": [["a", "1"], ["a", null], {"key": "b", "value": "2"}]}', 1)
    assert m.headers == [("a", b"1"), ("a", None), ("b", b"2")]


@pytest.mark.parametrize(("line", "needle"), [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"value": "x", "partition": "1"}', "partition must be an integer"),
    ('{"value": "x", "timestamp": 1.5}', "timestamp must be epoch milliseconds"),
    ('{"value": "%%%", "value_encoding": "base64"}', "value is not valid base64"),
    ('{"key": "zz", "key_encoding": "hex"}', "key is not valid hex"),
    ('{"value": "x", "value_encoding": "rot13"}', "unknown value encoding"),
    ('{"value": "x", "headers": [{"value": "no key"}]}', "a header must be"),
    ('{"value": "x", "headers": ["h"]}', "a header must be"),
])  # fmt: skip
def test_bad_json_lines_name_the_line(line, needle):
    with pytest.raises(UsageError) as err:
        list(messages_from_lines([b'{"value": "fine"}\n', b"\n", line.encode() + b"\n"], input_format="json"))
    assert str(err.value).startswith("line 3: ")
    assert needle in str(err.value)


def test_json_input_must_be_utf8():
    with pytest.raises(UsageError, match="line 1: JSON input must be UTF-8"):
        list(messages_from_lines([b'{"value": "\xff"}'], input_format="json"))


def test_json_lines_skip_blank_lines_and_add_extra_headers_and_the_given_partition_wins():
    lines = [b'{"value": "a"}\n', b"   \n",
             b'{"value": "b", "partition": 0, "headers": [{"key": "x", "value": "1"}]}\r\n']  # fmt: skip
    ms = list(messages_from_lines(lines, input_format="json", headers=[("extra", b"e")], partition=5))
    assert [(m.value, m.partition, m.headers, m.line) for m in ms] == [
        (b"a", 5, [("extra", b"e")], 1),
        (b"b", 5, [("x", b"1"), ("extra", b"e")], 3),  # -p overrides the line's own partition
    ]


def test_a_json_field_it_does_not_know_is_an_error_unless_ignored():
    with pytest.raises(UsageError, match=r"line 3: unknown field\(s\) 'vlaue'"):
        message_from_json('{"vlaue": "typo"}', 3)
    assert message_from_json('{"vlaue": "typo", "value": "v"}', 3, ignore_unknown=True).value == b"v"


# --- text lines ------------------------------------------------------------------------------------


def test_text_lines():
    ms = list(messages_from_lines([b"one\n", b"\n", b"two\r\n", b"\xff\xfe bin\n", b"last"]))
    assert [(m.key, m.value, m.line) for m in ms] == [
        (None, b"one", 1), (None, b"", 2), (None, b"two", 3), (None, b"\xff\xfe bin", 4), (None, b"last", 5),
    ]  # fmt: skip


def test_key_separator_splits_at_the_first_one():
    ms = list(messages_from_lines([b"k1:v1\n", b"k2::v:2\n", b":empty-key\n", b"empty-value:\n"], key_separator=b":"))
    assert [(m.key, m.value) for m in ms] == [(b"k1", b"v1"), (b"k2", b":v:2"), (b"", b"empty-key"),
                                              (b"empty-value", b"")]  # fmt: skip


def test_multi_byte_separator():
    (m,) = messages_from_lines([b"a=>b=>c\n"], key_separator=b"=>")
    assert (m.key, m.value) == (b"a", b"b=>c")


def test_a_missing_separator_names_the_line():
    lines = iter([b"a:1\n", b"b:2\n", b"no separator\n", b"c:3\n"])
    gen = messages_from_lines(lines, key_separator=b":")
    assert next(gen).value == b"1"
    assert next(gen).value == b"2"
    with pytest.raises(UsageError) as err:
        next(gen)
    assert str(err.value) == "line 3: no key separator ':'"


def test_null_literal_applies_to_keys_and_values():
    ms = list(messages_from_lines([b"NULL:v\n", b"k:NULL\n", b"NULL:NULL\n", b"NULLx:xNULL\n"], key_separator=b":",
                                  null_literal=b"NULL"))  # fmt: skip
    assert [(m.key, m.value) for m in ms] == [(None, b"v"), (b"k", None), (None, None), (b"NULLx", b"xNULL")]
    (m,) = messages_from_lines([b"NULL\n"], null_literal=b"NULL")
    assert (m.key, m.value) == (None, None)


def test_text_extra_headers_and_partition():
    (m,) = messages_from_lines([b"v\n"], headers=[("a", b"1"), ("a", b"2")], partition=3)
    assert m == Message(value=b"v", key=None, headers=[("a", b"1"), ("a", b"2")], partition=3, timestamp=None, line=1)


def test_parse_header():
    assert parse_header("a=1") == ("a", b"1")
    assert parse_header("a==b=c") == ("a", b"=b=c")
    assert parse_header("a=") == ("a", b"")
    assert parse_header("ключ=значение") == ("ключ", "значение".encode())
    for bad in ("novalue", "=x", ""):
        with pytest.raises(UsageError, match="expected name=value"):
            parse_header(bad)


# --- decoders --------------------------------------------------------------------------------------


def test_decode_bytes():
    assert decode_bytes(b"\x00\xffA", "hex") == "00ff41"
    assert decode_bytes(b"\x00\xffA", "base64") == "AP9B"
    assert decode_bytes(b'{"a":1}', "json") == '{\n  "a": 1\n}'
    assert decode_bytes('{"ä":"ö"}'.encode(), "json") == '{\n  "ä": "ö"\n}'
    assert decode_bytes(b"not json", "json") == "not json"
    assert decode_bytes(b"\xff", "json") == "\\xff"
    assert decode_bytes(b"ok \xff", "utf8") == "ok \\xff"
    assert decode_bytes("päivä".encode(), "utf8") == "päivä"
    assert decode_bytes(None, "hex") == ""
    assert decode_bytes(None, "utf8", null="NULL") == "NULL"
    assert decode_bytes(b"", "base64") == ""


@given(st.binary(max_size=64))
def test_hex_and_base64_decoders_are_lossless(data):
    assert bytes.fromhex(decode_bytes(data, "hex")) == data
    assert base64.b64decode(decode_bytes(data, "base64")) == data


# --- format strings --------------------------------------------------------------------------------


def test_every_token():
    render = compile_format("%t|%p|%o|%k|%s|%h|%T|%K|%S")
    r = rec(b"key", b"value!", [("a", b"1"), ("a", b"2"), ("n", None)])
    assert render(r) == f"orders|2|17|key|value!|a=1,a=2,n=|{TS}|3|6"


def test_the_iso_token_shows_the_timestamp_as_utc_with_milliseconds():
    render = compile_format("%I %T")
    assert render(rec(ts=1795655795480)) == "2026-11-26T01:16:35.480Z 1795655795480"
    assert iso_time(-1) == "-1" and iso_time(0) == "1970-01-01T00:00:00.000Z"


def test_null_key_and_value_lengths_are_minus_one():
    render = compile_format("[%k][%s][%K][%S][%h]")
    assert render(rec(None, None)) == "[][][-1][-1][]"
    assert render(rec(b"", b"")) == "[][][0][0][]"


def test_literal_text_with_token_letters_and_escapes():
    render = compile_format("topic t p o k s: %t part %p\\toffset=%o %% %%s key %k\\n")
    assert render(rec()) == "topic t p o k s: orders part 2\toffset=17 % %s key k\n"


def test_format_decoders():
    render = compile_format("%k %s")
    r = rec(b"\x01\x02", b'{"x": [1]}')
    assert render(r, "hex", "json") == '0102 {\n  "x": [\n    1\n  ]\n}'
    assert render(r, "base64", "base64") == "AQI= " + base64.b64encode(b'{"x": [1]}').decode()


def test_a_trailing_percent_is_literal():
    assert compile_format("100%")(rec()) == "100%"


@pytest.mark.parametrize("fmt", ["%x", "%s %q", "%P"])
def test_unknown_tokens_are_usage_errors(fmt):
    with pytest.raises(UsageError, match="unknown token"):
        compile_format(fmt)
