"""`kafkactl produce` and `kafkactl consume` as a user runs them: subprocesses against real brokers."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from broker.client.partitioner import partition_for_key
from broker.client.producer import AsyncProducer
from broker.daemon import free_port
from tests.integration.clientkit import (
    consumed_summary,
    create_topic,
    disk_batches,
    kcli,
    one_error,
    produced_summary,
    read_all,
    succeeded,
    unique,
)
from tests.integration.helpers import CliProcess, cli_env, wait_until

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def now_ms() -> int:
    return int(time.time() * 1000)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def field(obj: dict, name: str, encoding_key: str) -> bytes | None:
    """A key / value / header value of a JSON line as bytes (the encodings `consume -o json` writes)."""
    v = obj.get(name)
    if v is None:
        return None
    return base64.b64decode(v) if obj.get(encoding_key) == "base64" else v.encode()


def parse_json_out(out: bytes) -> list[dict]:
    """JSON lines of `consume -o json`, keys/values/headers turned into bytes."""
    rows = []
    for line in out.decode().splitlines():
        obj = json.loads(line)
        rows.append({
            "topic": obj["topic"], "partition": obj["partition"], "offset": obj["offset"],
            "timestamp": obj["timestamp"], "key": field(obj, "key", "key_encoding"),
            "value": field(obj, "value", "value_encoding"),
            "headers": [(h["key"], field(h, "value", "encoding")) for h in obj["headers"]],
        })  # fmt: skip
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


def messages(ts0: int) -> list[dict]:
    """Messages of every shape as (key, value, headers, partition, timestamp); partition None: the partitioner's."""
    ms = [
        (b"plain", b"plain value", [], None),
        (None, b"null key", [], 0),
        (b"null-value", None, [], 1),
        (None, None, [], 2),
        (b"empty-value", b"", [], None),
        (b"", b"empty key", [], 1),
        (b"\x00\xff\xfe\x80 bin", bytes(range(256)), [], None),
        ("ключ".encode(), "värde ✓ \"quoted\" \\ back".encode(), [("ä", "ö".encode())], 0),
        (b"hdrs", b"repeated and null headers",
         [("h", b"1"), ("h", b"2"), ("h", None), ("empty", b""), ("bin", b"\xff\x00"), ("h", b"3")], None),
        (b"multi\nline", b"line1\nline2\r\n", [], 2),
        (None, b"big " * 5000, [("big", b"y" * 3000)], 2),
    ]  # fmt: skip
    ms += [(b"key-%d" % (i % 7), b"value %d" % i, [("i", b"%d" % i)], None) for i in range(30)]
    return [dict(key=k, value=v, headers=h, partition=p, timestamp=ts0 + 10 * i) for i, (k, v, h, p) in enumerate(ms)]


def json_input(msgs: list[dict]) -> bytes:
    """`produce --input json` lines for `msgs` (binary as base64, text as text)."""

    def put(obj, name, enc, data):
        if data is None:
            obj[name] = None
            return
        try:
            obj[name] = data.decode()
        except UnicodeDecodeError:
            obj[name] = b64(data)
            obj[enc] = "base64"

    lines = []
    for m in msgs:
        obj: dict = {}
        put(obj, "key", "key_encoding", m["key"])
        put(obj, "value", "value_encoding", m["value"])
        headers = []
        for hk, hv in m["headers"]:
            h = {"key": hk}
            put(h, "value", "encoding", hv)
            headers.append(h)
        obj["headers"] = headers
        obj["timestamp"] = m["timestamp"]
        if m["partition"] is not None:
            obj["partition"] = m["partition"]
        lines.append(json.dumps(obj))
    return ("\n".join(lines) + "\n").encode()


def expected_rows(topic: str, msgs: list[dict], partitions: int) -> list[dict]:
    """Where each message must land and what it must carry, offsets in input order per partition."""
    nxt: dict[int, int] = {}
    rows = []
    for m in msgs:
        p = m["partition"] if m["partition"] is not None else partition_for_key(m["key"], partitions)
        off = nxt.get(p, 0)
        nxt[p] = off + 1
        rows.append({"topic": topic, "partition": p, "offset": off, "timestamp": m["timestamp"], "key": m["key"],
                     "value": m["value"], "headers": list(m["headers"])})  # fmt: skip
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


# --- round trips -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_produce_then_consume_json_every_codec(shared_broker, codec):
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique(f"cli-{codec}"), 3)
    msgs = messages(now_ms() - 60_000)
    r = succeeded(kcli("produce", topic, "--input", "json", "--compression", codec, "-b", bs, input=json_input(msgs)))
    want = expected_rows(topic, msgs, 3)
    count, spans = produced_summary(r.err)
    assert count == len(msgs)
    assert spans == {p: (0, max(w["offset"] for w in want if w["partition"] == p)) for p in range(3)}

    out = succeeded(kcli("consume", topic, "-o", "json", "-b", bs))
    assert parse_json_out(out.out) == want
    assert consumed_summary(out.err) == len(msgs)
    heads = [h for p in range(3) for h, _ in disk_batches(shared_broker.log_dir, topic, p)]
    assert {h.codec for h in heads} == {CODEC_IDS[codec]}


def test_text_lines_with_keys_headers_nulls_and_binary(shared_broker):
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("cli-text"), 3)
    lines = [b"alpha:one", b"NULL:null key", b"beta:NULL", b"gamma:", b":empty key", b"\xff\xfebin:\x00\x80\xff",
             b"delta:with:colons", b"crlf:line\r"]  # fmt: skip
    r = succeeded(kcli("produce", topic, "-K", ":", "--null-literal", "NULL", "-H", "h=1", "-H", "h=2", "-H", "x=",
                       "-b", bs, input=b"\n".join(lines) + b"\n"))  # fmt: skip
    assert produced_summary(r.err)[0] == len(lines)
    pairs = [(b"alpha", b"one"), (None, b"null key"), (b"beta", None), (b"gamma", b""), (b"", b"empty key"),
             (b"\xff\xfebin", b"\x00\x80\xff"), (b"delta", b"with:colons"), (b"crlf", b"line")]  # fmt: skip
    rows = parse_json_out(succeeded(kcli("consume", topic, "-o", "json", "-b", bs)).out)
    assert sorted((r["key"] or b"", r["value"] or b"") for r in rows) == sorted((k or b"", v or b"") for k, v in pairs)
    by_value = {r["value"]: r for r in rows}
    for k, v in pairs:
        row = by_value[v]
        assert row["key"] == k
        assert row["headers"] == [("h", b"1"), ("h", b"2"), ("x", b"")]
        if k is not None:
            assert row["partition"] == partition_for_key(k, 3)
    unkeyed = [r for r in rows if r["key"] is None]
    assert len(unkeyed) == 1


def test_partition_option_and_unkeyed_lines(shared_broker):
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("cli-part"), 3)
    r = succeeded(kcli("produce", topic, "-p", "2", "-b", bs, input=b"a\nb\n\nc\n"))
    assert produced_summary(r.err) == (4, {2: (0, 3)})
    rows = parse_json_out(succeeded(kcli("consume", topic, "-o", "json", "-b", bs)).out)
    assert [(r["partition"], r["offset"], r["key"], r["value"], r["headers"]) for r in rows] == [
        (2, 0, None, b"a", []), (2, 1, None, b"b", []), (2, 2, None, b"", []), (2, 3, None, b"c", []),
    ]  # fmt: skip


def test_consume_json_into_produce_json_copies_a_topic_exactly(shared_broker):
    bs = shared_broker.bootstrap
    src = create_topic(bs, unique("copy-src"), 3)
    dst = create_topic(bs, unique("copy-dst"), 3)
    msgs = messages(now_ms() - 120_000)
    succeeded(kcli("produce", src, "--input", "json", "-b", bs, input=json_input(msgs)))
    dump = succeeded(kcli("consume", src, "-o", "json", "-b", bs)).out
    r = succeeded(kcli("produce", dst, "--input", "json", "-b", bs, input=dump))
    assert produced_summary(r.err)[0] == len(msgs)
    copy = succeeded(kcli("consume", dst, "-o", "json", "-b", bs)).out
    original = [json.loads(ln) for ln in dump.decode().splitlines()]
    copied = [json.loads(ln) for ln in copy.decode().splitlines()]
    assert len(copied) == len(original) == len(msgs)
    for obj in original + copied:
        obj.pop("topic")
    key = lambda o: (o["partition"], o["offset"])  # noqa: E731
    assert sorted(copied, key=key) == sorted(original, key=key)  # partition, offset, key, value, headers, timestamp
    assert parse_json_out(dump) == [dict(r, topic=src) for r in expected_rows(src, msgs, 3)]


# --- offsets ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def timeline(shared_broker):
    """Two partitions, six messages each, stamped 55, 45, 35, 25, 15 and 5 minutes ago (whole seconds)."""
    topic = create_topic(shared_broker.bootstrap, unique("timeline"), 2)
    base = (now_ms() // 1000) * 1000 - 55 * 60_000
    stamps = [base + i * 600_000 for i in range(6)]
    lines = [json.dumps({"partition": p, "key": f"p{p}", "value": f"p{p}-{i}", "timestamp": ts})
             for p in (0, 1) for i, ts in enumerate(stamps)]  # fmt: skip
    succeeded(kcli("produce", topic, "--input", "json", "-b", shared_broker.bootstrap,
                   input="\n".join(lines).encode()))  # fmt: skip
    return topic, stamps


def _iso(ms: int, tz=UTC) -> str:
    return datetime.fromtimestamp(ms / 1000, tz).isoformat()


@pytest.mark.parametrize(("offset", "first"), [
    ("beginning", 0), ("end", 6), ("2", 2), ("99", 6), ("-2", 4), ("-10", 0), ("1h", 0), ("30m", 3), ("10m", 5),
    ("1m", 6), ("@T3", 3), ("@T3+1", 4), ("isoZ3", 3), ("iso+2h3", 3), ("iso-5:30h4", 4),
])  # fmt: skip
def test_offset_grammar_on_the_command_line(shared_broker, timeline, offset, first):
    topic, stamps = timeline
    if offset.startswith("@T"):
        i, _, plus = offset[2:].partition("+")
        offset = f"@{stamps[int(i)] + int(plus or 0)}"
    elif offset.startswith("isoZ"):
        offset = _iso(stamps[int(offset[4:])]).replace("+00:00", "Z")
    elif offset.startswith("iso+2h"):
        offset = _iso(stamps[int(offset[6:])], timezone(timedelta(hours=2)))
        assert offset.endswith("+02:00")
    elif offset.startswith("iso-5:30h"):
        offset = _iso(stamps[int(offset[9:])], timezone(-timedelta(hours=5, minutes=30)))
        assert offset.endswith("-05:30")
    r = succeeded(kcli("consume", topic, "--offset", offset, "--format", "%p %o %s\\n", "-b", shared_broker.bootstrap))
    got = sorted(r.stdout.splitlines())
    assert got == sorted(f"{p} {o} p{p}-{o}" for p in (0, 1) for o in range(first, 6)), offset
    assert consumed_summary(r.err) == len(got)


def test_offset_with_one_partition(shared_broker, timeline):
    topic, stamps = timeline
    r = succeeded(kcli("consume", topic, "-p", "1", "--offset", "-3", "--format", "%p:%o:%T\\n",
                       "-b", shared_broker.bootstrap))  # fmt: skip
    assert r.stdout.splitlines() == [f"1:{o}:{stamps[o]}" for o in (3, 4, 5)]


@pytest.mark.parametrize(
    ("offset", "needle"),
    [
        ("bogus", "invalid offset 'bogus'"),
        ("+3", "needs --group"),
        ("@-5", "cannot be negative"),
        ("10 m", "invalid offset"),
    ],
)
def test_bad_offset(shared_broker, timeline, offset, needle):
    topic, _ = timeline
    one_error(kcli("consume", topic, "--offset", offset, "-b", shared_broker.bootstrap), needle, code=2)


# --- output options --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def formatted(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("fmt"), 2)
    lines = [
        {"partition": 1, "key": "kéy", "value": '{"a": [1, 2]}', "timestamp": 1_700_000_000_001,
         "headers": [{"key": "h", "value": "1"}, {"key": "h", "value": None}, {"key": "z", "value": "zz"}]},
        {"partition": 1, "key": None, "value": None, "timestamp": 1_700_000_000_002},
        {"partition": 1, "key": b64(b"\x00\xff"), "key_encoding": "base64", "value": b64(b"\xfe\x01"),
         "value_encoding": "base64", "timestamp": 1_700_000_000_003},
    ]  # fmt: skip
    succeeded(kcli("produce", topic, "--input", "json", "-b", shared_broker.bootstrap,
                   input="\n".join(map(json.dumps, lines)).encode()))  # fmt: skip
    return topic


def test_every_format_token(shared_broker, formatted):
    fmt = "topic=%t part=%p off=%o key=%k val=%s hdr=%h ts=%T kl=%K vl=%S%%\\n"
    r = succeeded(kcli("consume", formatted, "--format", fmt, "-b", shared_broker.bootstrap))
    assert r.stdout.splitlines() == [
        f'topic={formatted} part=1 off=0 key=kéy val={{"a": [1, 2]}} hdr=h=1,h=,z=zz ts=1700000000001 kl=4 vl=13%',
        f"topic={formatted} part=1 off=1 key= val= hdr= ts=1700000000002 kl=-1 vl=-1%",
        f"topic={formatted} part=1 off=2 key=\x00\\xff val=\\xfe\x01 hdr= ts=1700000000003 kl=2 vl=2%",
    ]


def test_tab_escape_and_literal_letters(shared_broker, formatted):
    r = succeeded(kcli("consume", formatted, "--format", "p t o:%o\\t%p\\n", "-c", "2", "-b",
                       shared_broker.bootstrap))  # fmt: skip
    assert r.out == b"p t o:0\t1\np t o:1\t1\n"


def test_default_output_is_the_value_per_line(shared_broker, formatted):
    r = succeeded(kcli("consume", formatted, "-b", shared_broker.bootstrap))
    assert r.out == b'{"a": [1, 2]}\n\n\\xfe\x01\n'  # invalid UTF-8 escaped, valid control bytes as they are


@pytest.mark.parametrize(("kd", "vd", "expected"), [
    ("hex", "hex", ["6bc3a979|7b2261223a205b312c20325d7d", "|", "00ff|fe01"]),
    ("base64", "base64", ["a8OpeQ==|eyJhIjogWzEsIDJdfQ==", "|", "AP8=|/gE="]),
    ("utf8", "json", ['kéy|{', '  "a": [', "    1,", "    2", "  ]", "}", "|", "\x00\\xff|\\xfe\x01"]),
])  # fmt: skip
def test_key_and_value_decoders(shared_broker, formatted, kd, vd, expected):
    r = succeeded(kcli("consume", formatted, "--key-decoder", kd, "--value-decoder", vd, "--format", "%k|%s\\n",
                       "-b", shared_broker.bootstrap))  # fmt: skip
    assert r.stdout.splitlines() == expected


@pytest.mark.parametrize("args", [["--key-decoder", "rot13"], ["--value-decoder", "utf16"], ["--format", "%x"],
                                  ["--follow", "--exit"]])  # fmt: skip
def test_bad_output_options(shared_broker, formatted, args):
    one_error(kcli("consume", formatted, *args, "-b", shared_broker.bootstrap), code=2)


def test_max_messages(shared_broker, timeline):
    topic, _ = timeline
    r = succeeded(kcli("consume", topic, "-p", "0", "-c", "3", "--format", "%o\\n", "-b", shared_broker.bootstrap))
    assert r.stdout.splitlines() == ["0", "1", "2"]
    assert consumed_summary(r.err) == 3
    r = succeeded(kcli("consume", topic, "--max-messages", "4", "--offset", "-1", "--format", "%o\\n",
                       "-b", shared_broker.bootstrap))  # fmt: skip
    assert r.stdout.splitlines() == ["5", "5"]  # only two there: it stops at the end anyway


def test_acks_options(shared_broker):
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("cli-acks"), 1)
    r = succeeded(kcli("produce", topic, "--acks", "0", "-b", bs, input=b"a\nb\n"))
    assert "p0 (acks=0: no offsets)" in r.err
    assert produced_summary(r.err) == (2, {0: (-1, -1)})
    r = succeeded(kcli("produce", topic, "--acks", "1", "-b", bs, input=b"c\n"))
    assert produced_summary(r.err) == (1, {0: (2, 2)})
    assert [x.value for x in wait_until(lambda: read_all(bs, topic), 10, "3 records")] == [b"a", b"b", b"c"]
    one_error(kcli("produce", topic, "--acks", "2", "-b", bs, input=b"d\n"), "acks")


# --- follow ----------------------------------------------------------------------------------------


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    async def run():
        async with AsyncProducer(bootstrap) as p:
            for v in values:
                await (await p.send(topic, v, partition=0))

    asyncio.run(run())


def _interrupt(proc: CliProcess, timeout: float = 20) -> int:
    proc.proc.send_signal(signal.SIGINT)
    try:
        return proc.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"consume --follow did not end within {timeout}s of SIGINT:\n{proc.output()}") from None


def test_follow_from_the_beginning_picks_up_new_messages_and_ends_on_sigint(shared_broker, tmp_path):
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("follow"), 1)
    _produce(bs, topic, [b"old-1", b"old-2"])
    with CliProcess(["consume", topic, "--follow", "--offset", "beginning", "--format", "%o=%s\\n", "-b", bs],
                    tmp_path, name="follow") as proc:  # fmt: skip
        proc.wait_for_stdout("1=old-2\n")
        _produce(bs, topic, [b"new-1", b"new-2", b"new-3"])
        proc.wait_for_stdout("4=new-3\n")
        rc = _interrupt(proc)
    assert rc in (0, 130), proc.output()
    assert proc.stdout() == "0=old-1\n1=old-2\n2=new-1\n3=new-2\n4=new-3\n"
    err = proc.stderr()
    assert "Traceback" not in err and "error" not in err, err
    assert err.strip().splitlines()[-1] == f"consumed 5 message(s), 25 bytes from {topic}: last offsets p0@4"


def test_follow_starts_at_the_end(shared_broker, tmp_path):
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("follow-end"), 1)
    _produce(bs, topic, [b"old"])
    with CliProcess(["consume", topic, "--follow", "--format", "%o=%s\\n", "-b", bs], tmp_path, name="tail") as proc:
        sent = []
        deadline = time.monotonic() + 30
        while not proc.stdout():  # it says nothing until it has a position: keep producing until it shows up
            assert time.monotonic() < deadline and proc.alive, proc.output()
            sent.append(b"new-%d" % len(sent))
            _produce(bs, topic, [sent[-1]])
            time.sleep(0.3)
        _produce(bs, topic, [b"last"])
        proc.wait_for_stdout("=last\n")
        rc = _interrupt(proc)
    assert rc in (0, 130), proc.output()
    lines = proc.stdout().splitlines()
    assert "0=old" not in lines
    first = int(lines[0].split("=")[0])
    assert first >= 1
    assert lines == [f"{o}={v.decode()}" for o, v in enumerate(sent + [b"last"], start=1)][first - 1 :]
    assert f"consumed {len(lines)} message(s)" in proc.stderr()


def test_follow_with_max_messages_ends_by_itself(shared_broker, tmp_path):
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("follow-c"), 1)
    _produce(bs, topic, [b"a"])
    with CliProcess(["consume", topic, "-f", "--offset", "beginning", "-c", "3", "-b", bs], tmp_path,
                    name="followc") as proc:  # fmt: skip
        proc.wait_for_stdout("a\n")
        _produce(bs, topic, [b"b", b"c", b"d", b"e"])
        rc = proc.proc.wait(20)
    assert rc == 0, proc.output()
    assert proc.stdout() == "a\nb\nc\n"
    assert consumed_summary(proc.stderr()) == 3


# --- failures --------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["consume", "produce"])
def test_broker_down(command):
    port = free_port()  # nothing listens there
    one_error(kcli(command, "t", "-b", f"127.0.0.1:{port}", input=b"x\n"), f"127.0.0.1:{port}", code=1)


def test_produce_from_a_file(shared_broker, tmp_path):
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("file"), 1)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"key": "k", "value": "from a file", "timestamp": 1700000000000}\n{"value": null}\n')
    r = succeeded(kcli("produce", topic, "--input", "json", "-f", path, "-b", bs, input=b"not this\n"))
    assert produced_summary(r.err) == (2, {0: (0, 1)})
    assert [(x.key, x.value) for x in read_all(bs, topic)] == [(b"k", b"from a file"), (None, None)]
    one_error(kcli("produce", topic, "-f", tmp_path / "missing", "-b", bs), "no such file or directory", code=2)


def test_consume_an_unknown_topic(shared_broker):
    name = unique("nosuch")
    one_error(kcli("consume", name, "-b", shared_broker.bootstrap), name, "UNKNOWN_TOPIC_OR_PARTITION", code=1)


def test_a_partition_that_does_not_exist(shared_broker):
    bs = shared_broker.bootstrap
    topic = create_topic(bs, unique("p7"), 2)
    r = kcli("produce", topic, "--partition", "7", "-b", bs, input=b"x\ny\n")
    one_error(r, "has 2 partition(s), no partition 7 (--partition 7)", "line 1", code=2)  # before anything is sent
    one_error(kcli("consume", topic, "--partition", "7", "-b", bs), "no partition 7")
    assert read_all(bs, topic) == []


def test_missing_key_separator_names_the_line(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("nosep"), 1)
    r = kcli("produce", topic, "-K", ":", "-b", shared_broker.bootstrap, input=b"a:1\nb:2\nno separator\nc:3\n")
    one_error(r, "line 3", "no key separator ':'", code=2, allow_summary=True)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b'{"value": "ok"}\n{broken\n', "line 2: not JSON"),
        (b'{"value": "ok"}\n\n{"partition": "x"}\n', "line 3: partition"),
    ],
)
def test_bad_json_input_names_the_line(shared_broker, data, needle):
    topic = create_topic(shared_broker.bootstrap, unique("badjson"), 1)
    r = kcli("produce", topic, "--input", "json", "-b", shared_broker.bootstrap, input=data)
    one_error(r, needle, code=2, allow_summary=True)


@pytest.mark.parametrize("args", [["--input", "xml"], ["--compression", "brotli"], ["-K", ""], ["-H", "novalue"]])
def test_bad_produce_options(shared_broker, args):
    one_error(kcli("produce", "whatever", *args, "-b", shared_broker.bootstrap, input=b"x\n"), code=2)


def test_message_too_large_fails_alone_and_is_not_counted(start_broker):
    b = start_broker(1, overrides={"message.max.bytes": "2000"})
    topic = create_topic(b.bootstrap, "limits", 1)
    r = kcli("produce", topic, "-b", b.bootstrap, input=b"small-1\n" + b"x" * 5000 + b"\nsmall-3\n")
    line = one_error(r, "line 2", "MESSAGE_TOO_LARGE", code=1, allow_summary=True)
    assert "1 message(s) not acknowledged" in line
    assert produced_summary(r.err)[0] == 2
    assert [x.value for x in read_all(b.bootstrap, topic)] == [b"small-1", b"small-3"]


@pytest.mark.chaos
def test_broker_killed_mid_stream(start_broker, tmp_path):
    """The producer is fed a long stdin stream; the broker is SIGKILLed and stays down. The command must fail,
    and whatever it reports as produced must be in the log."""
    b = start_broker(1)
    topic = create_topic(b.bootstrap, "stream", 1)
    err_path = tmp_path / "produce.stderr"
    stop = threading.Event()
    fed = [0]
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "kafkactl", "produce", topic, "-b", b.bootstrap,
                                 "--delivery-timeout-ms", "5000"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=cli_env())  # fmt: skip

    def feed():
        try:
            while not stop.is_set():
                proc.stdin.write(b"".join(b"m%08d\n" % (fed[0] + j) for j in range(200)))
                proc.stdin.flush()
                fed[0] += 200
                time.sleep(0.01)
        except (BrokenPipeError, ValueError):
            pass
        finally:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass

    def on_disk() -> list:
        return [r for _, batch in disk_batches(b.log_dir, topic, 0) for r in batch]

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        # a stream is produced while it flows, not once stdin ends
        wait_until(lambda: len(on_disk()) >= 1000, 15, "records on disk while produce's stdin is still open")
        b.kill()
        time.sleep(1.0)
        stop.set()
        feeder.join(10)
        rc = proc.wait(60)  # --delivery-timeout-ms (5 s) bounds the retries
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    r_err = err_path.read_text()
    assert rc != 0, r_err
    assert "Traceback" not in r_err, r_err
    errors = [ln for ln in r_err.splitlines() if ln.startswith("kafkactl: error: ")]
    assert len(errors) == 1 and "not acknowledged" in errors[0], r_err
    assert proc.stdout.read() == b""
    count, spans = produced_summary(r_err)
    log = on_disk()
    values = [r.value for r in log]
    assert [r.offset for r in log] == list(range(len(log)))
    assert values == [b"m%08d" % i for i in range(len(log))]  # in order, no duplicates, nothing invented
    assert 0 < count <= len(log) < fed[0]
    if spans:
        first, last = spans[0]
        assert 0 <= first <= last < len(log)  # every offset reported as produced is in the log
