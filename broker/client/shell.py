"""What `produce` and `consume` do from a shell: lines in, messages out, and the reverse.

JSON lines are the lossless form: one object per message with `topic`, `partition`, `offset`,
`timestamp`, `key`, `value` and `headers` (a list of `{"key", "value"}`). Keys, values and header
values are UTF-8 text when they decode, else base64 with `"key_encoding"`, `"value_encoding"` or a
header's `"encoding"` set to `"base64"`; null stays null. `consume -o json` prints exactly what
`produce --input json` reads. Text output uses kcat's format tokens.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime
import json
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from broker.client.consumer import AsyncConsumer, ConsumeError, ConsumerRecord, describe_partitions
from broker.client.offsets import OffsetSpec, resolve
from broker.client.producer import AsyncProducer, Delivery, ProduceError
from broker.errors import KafkactlError, UsageError
from broker.protocol.errors import ErrorCode


@dataclass
class Message:
    """One message to produce."""

    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    partition: int | None = None
    timestamp: int | None = None
    line: int = 0  # where it came from, for error messages


# -- encodings ---------------------------------------------------------------------------------------


def _text_or_b64(data: bytes | None) -> tuple[str | None, bool]:
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), True


def record_json(r: ConsumerRecord) -> dict[str, Any]:
    """The JSON object of a consumed record (lossless; see the module doc)."""
    key, key_b64 = _text_or_b64(r.key)
    value, value_b64 = _text_or_b64(r.value)
    headers = []
    for hk, hv in r.headers:
        text, b64 = _text_or_b64(hv)
        headers.append({"key": hk, "value": text, "encoding": "base64"} if b64 else {"key": hk, "value": text})
    obj: dict[str, Any] = {"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp}
    if r.timestamp_type:
        obj["timestamp_type"] = "LogAppendTime"
    obj["key"] = key
    if key_b64:
        obj["key_encoding"] = "base64"
    obj["value"] = value
    if value_b64:
        obj["value_encoding"] = "base64"
    obj["headers"] = headers
    return obj


def _field_bytes(obj: dict[str, Any], name: str, encoding: str | None, line: int) -> bytes | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        value = json.dumps(value, separators=(",", ":"))  # a JSON value given inline: its compact text
    if encoding in (None, "utf8", "utf-8"):
        return value.encode()
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise UsageError(f"line {line}: {name} is not valid base64") from None
    if encoding == "hex":
        try:
            return bytes.fromhex(value)
        except ValueError:
            raise UsageError(f"line {line}: {name} is not valid hex") from None
    raise UsageError(f"line {line}: unknown {name} encoding {encoding!r} (utf8, base64 or hex)")


#: the fields of a JSON line (`record_json` writes them; `offset`, `topic` and `timestamp_type` are read and ignored)
JSON_FIELDS = frozenset({"topic", "partition", "offset", "timestamp", "timestamp_type", "key", "key_encoding",
                         "value", "value_encoding", "headers"})  # fmt: skip


def message_from_json(text: str, line: int, *, ignore_unknown: bool = False) -> Message:
    """A Message from one JSON line (the shape `record_json` writes); a field it does not know is an error
    (a typo such as "vlaue" would otherwise send a null value) unless `ignore_unknown`."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"line {line}: not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"line {line}: expected a JSON object")
    unknown = sorted(k for k in obj if k not in JSON_FIELDS)
    if unknown and not ignore_unknown:
        raise UsageError(f"line {line}: unknown field(s) {', '.join(map(repr, unknown))} (known: "
                         f"{', '.join(sorted(JSON_FIELDS))}; --ignore-unknown-fields to skip them)")  # fmt: skip
    headers = []
    for h in obj.get("headers") or []:
        if isinstance(h, dict) and isinstance(h.get("key"), str):
            headers.append((h["key"], _field_bytes(h, "value", h.get("encoding"), line)))
        elif isinstance(h, list | tuple) and len(h) == 2 and isinstance(h[0], str):
            headers.append((h[0], None if h[1] is None else str(h[1]).encode()))
        else:
            raise UsageError(f'line {line}: a header must be {{"key": ..., "value": ...}}')
    partition = obj.get("partition")
    timestamp = obj.get("timestamp")
    if partition is not None and not isinstance(partition, int):
        raise UsageError(f"line {line}: partition must be an integer")
    if timestamp is not None and not isinstance(timestamp, int):
        raise UsageError(f"line {line}: timestamp must be epoch milliseconds")
    return Message(
        value=_field_bytes(obj, "value", obj.get("value_encoding"), line),
        key=_field_bytes(obj, "key", obj.get("key_encoding"), line),
        headers=headers, partition=partition, timestamp=timestamp, line=line,
    )  # fmt: skip


def messages_from_lines(lines: Iterable[bytes], *, input_format: str = "text", key_separator: bytes | None = None,
                        null_literal: bytes | None = None, headers: list[tuple[str, bytes | None]] | None = None,
                        partition: int | None = None, first_line: int = 1,
                        ignore_unknown: bool = False) -> Iterator[Message]:  # fmt: skip
    """Messages from input lines (newline already stripped or not): text with an optional key, or JSON
    (`partition`, when given, overrides the partition a JSON line names)."""
    extra = list(headers or [])
    for n, raw in enumerate(lines, first_line):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        if input_format == "json":
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                raise UsageError(f"line {n}: JSON input must be UTF-8") from None
            m = message_from_json(text, n, ignore_unknown=ignore_unknown)
            m.headers = m.headers + extra
            if partition is not None:
                m.partition = partition
            yield m
            continue
        key = None
        value: bytes | None = line
        if key_separator is not None:
            k, sep, v = line.partition(key_separator)
            if not sep:
                raise UsageError(f"line {n}: no key separator {key_separator.decode(errors='replace')!r}")
            key, value = k, v
        if null_literal is not None:
            key = None if key == null_literal else key
            value = None if value == null_literal else value
        yield Message(value=value, key=key, headers=extra, partition=partition, line=n)


def parse_header(text: str) -> tuple[str, bytes]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise UsageError(f"--header {text!r}: expected name=value")
    return name, value.encode()


# -- produce -----------------------------------------------------------------------------------------


async def read_lines(fd: int, chunk: int = 1 << 16) -> AsyncIterator[list[bytes]]:
    """Lines of a file descriptor, read off the event loop: each read returns what is there (a pipe's
    few lines at once, a file's 64 KiB), so typed lines go out at once and big inputs go in bulk."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(maxsize=16)
    stop = threading.Event()

    def reader() -> None:
        rest = b""
        try:
            while not stop.is_set():
                data = os.read(fd, chunk)
                if not data:
                    break
                lines = (rest + data).split(b"\n")
                rest = lines.pop()
                if lines:
                    asyncio.run_coroutine_threadsafe(queue.put(lines), loop).result()
            if rest and not stop.is_set():
                asyncio.run_coroutine_threadsafe(queue.put([rest]), loop).result()
        except BaseException as exc:  # noqa: BLE001 - handed to the loop
            if not stop.is_set():
                asyncio.run_coroutine_threadsafe(queue.put(exc), loop).result()
            return
        if not stop.is_set():
            asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()

    thread = threading.Thread(target=reader, name="kafkactl-input", daemon=True)
    thread.start()
    try:
        while True:
            item = await queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while not queue.empty():  # unblock a reader waiting to hand over a chunk
            queue.get_nowait()


@dataclass
class ProduceSummary:
    messages: int = 0
    bytes: int = 0
    partitions: dict[int, list[int]] = field(default_factory=dict)  # partition → [first, last] offset
    failures: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)
    seconds: float = 0.0

    def acked(self, partition: int, offset: int) -> None:
        span = self.partitions.get(partition)
        if span is None:
            self.partitions[partition] = [offset, offset]
        else:
            span[0] = min(span[0], offset)
            span[1] = max(span[1], offset)


async def _as_async(messages: Iterable[Message] | AsyncIterator[Message]) -> AsyncIterator[Message]:
    if hasattr(messages, "__aiter__"):
        async for m in messages:  # type: ignore[union-attr]
            yield m
    else:
        for m in messages:  # type: ignore[union-attr]
            yield m


async def produce_messages(producer: AsyncProducer, topic: str,
                           messages: Iterable[Message] | AsyncIterator[Message], advance=lambda n: None,
                           summary: ProduceSummary | None = None) -> ProduceSummary:  # fmt: skip
    """Send every message and wait for every answer; a message counts only once acknowledged.

    An input error (a bad line) stops the reading, but what was sent before it is still awaited and
    counted in `summary` before the error propagates.
    """
    summary = summary if summary is not None else ProduceSummary()
    t0 = time.perf_counter()
    pending: list[tuple[Message, Delivery, int]] = []

    def settle(upto: int) -> None:
        for m, d, size in pending[:upto]:
            exc = d.exception()
            if exc is not None:
                summary.failures.append((m.line, str(exc)))
                continue
            md = d.result()
            summary.messages += 1
            summary.bytes += size
            if md.offset >= 0:
                summary.acked(md.partition, md.offset)
            else:
                summary.partitions.setdefault(md.partition, [-1, -1])
        del pending[:upto]

    try:
        async for m in _as_async(messages):
            try:
                d = await producer.send(topic, m.value, m.key, headers=m.headers, partition=m.partition,
                                        timestamp=m.timestamp)  # fmt: skip
            except ProduceError as exc:
                summary.failures.append((m.line, str(exc)))
                continue
            size = (len(m.value) if m.value else 0) + (len(m.key) if m.key else 0)
            pending.append((m, d, size))
            advance(size + 1)
            if len(pending) >= 100_000:
                done = 0
                while done < len(pending) and pending[done][1].done():
                    done += 1
                settle(done)
    finally:
        await producer.flush()
        settle(len(pending))
        summary.seconds = time.perf_counter() - t0
    return summary


async def within_partitions(
    producer: AsyncProducer,
    topic: str,
    messages: Iterable[Message] | AsyncIterator[Message],
    grow: Callable[[int], Awaitable[None]] | None = None,
    given: int | None = None,
) -> AsyncIterator[Message]:
    """The messages, checked against the topic's partition count before each is sent: one naming a partition
    the topic lacks is an input error naming its line (nothing of it is sent), or with `grow` the topic is
    first given that many partitions (`produce --create`)."""
    count = await producer.partitions(topic)
    async for m in _as_async(messages):
        if m.partition is not None and m.partition >= count:
            if given is not None:
                raise UsageError(
                    f"line {m.line}: topic {topic!r} has {count} partition(s), no partition {given} "
                    f"(--partition {given})"
                )
            if grow is None:
                raise UsageError(f"line {m.line}: topic {topic!r} has {count} partition(s), no partition "
                                 f"{m.partition}; give -p N to write every message to one partition, or --create "
                                 "to give the topic the partitions the input names")  # fmt: skip
            await grow(m.partition + 1)
            await producer.cluster.refresh([topic])
            count = await producer.partitions(topic)
        yield m


async def stream_messages(fd: int, **options) -> AsyncIterator[Message]:
    """`messages_from_lines` over a file descriptor read by `read_lines`."""
    line = 1
    async for lines in read_lines(fd):
        for m in messages_from_lines(lines, first_line=line, **options):
            yield m
        line += len(lines)


# -- consume -----------------------------------------------------------------------------------------


@dataclass
class ConsumeSummary:
    messages: int = 0
    bytes: int = 0
    last: dict[int, int] = field(default_factory=dict)  # partition → last offset read
    seconds: float = 0.0


def grep_matcher(pattern: str) -> Callable[[ConsumerRecord], bool]:
    """A test of a record: the regex (UTF-8) is found in its key, its value or a header's value (as bytes)."""
    try:
        rx = re.compile(pattern.encode())
    except re.error as exc:
        raise UsageError(f"--grep {pattern!r}: not a regular expression ({exc})") from None

    def match(r: ConsumerRecord) -> bool:
        return any(b is not None and rx.search(b) for b in (r.key, r.value, *(v for _, v in r.headers)))

    return match


async def start_positions(consumer: AsyncConsumer, tps: list[tuple[str, int]], spec: OffsetSpec,
                          until: OffsetSpec | None = None) -> dict:  # fmt: skip
    """Seek every partition as `spec` says; returns {tp: (start offset, end offset at start)}, the end cut
    to `until` (an offset, or the first offset at or after a time) when it is given."""
    starts = await consumer.beginning_offsets(tps)
    ends = await consumer.end_offsets(tps)
    if until is not None and until.kind == "timestamp":
        found = await consumer.list_offsets(tps, until.value)
        ends = {tp: min(ends[tp], off) if off >= 0 else ends[tp] for tp, off in found.items()}
    elif until is not None:
        ends = {tp: min(ends[tp], resolve(until, starts[tp], ends[tp])) for tp in tps}
    if spec.kind == "timestamp":
        found = await consumer.list_offsets(tps, spec.value)
        chosen = {tp: (off if off >= 0 else ends[tp]) for tp, off in found.items()}
    else:
        chosen = {tp: resolve(spec, starts[tp], ends[tp]) for tp in tps}
    for tp, off in chosen.items():
        consumer.seek(tp, off)
    return {tp: (chosen[tp], ends[tp]) for tp in tps}


async def consume_records(consumer: AsyncConsumer, tps: list[tuple[str, int]], spec: OffsetSpec, *,
                          follow: bool, max_messages: int | None, summary: ConsumeSummary,
                          on_offline: Callable[[list[tuple[str, int]]], None] | None = None,
                          on_clamped: Callable[[tuple[str, int], int, int], None] | None = None,
                          until: OffsetSpec | None = None, match: Callable[[ConsumerRecord], bool] | None = None,
                          refresh_s: float = 0.5) -> AsyncIterator[list[ConsumerRecord]]:  # fmt: skip
    """Batches of records in offset order per partition, until the pinned ends (unless following).

    A partition with no leader (its broker is down) does not hold up the others: `on_offline` is told
    once which ones are left out, metadata is asked for every `refresh_s` while any is, and each is
    read from where `spec` says (its end pinned then) as soon as it has a leader again. Without
    `follow`, once every readable partition is read to its end, the partitions that are still without
    a leader end it with a ConsumeError (LEADER_NOT_AVAILABLE) naming them. An absolute offset outside a
    partition's log is read from the nearest end; `on_clamped(tp, asked, end)` says so. `until` cuts each
    partition's end (without `follow`); only records `match` accepts are handed out (and counted).
    """
    cluster = consumer.cluster
    await consumer.check_leaders(tps)  # a leader that cannot be reached is waited for (told by cluster.waits)
    waiting = cluster.leaderless(tps)  # not assigned (nothing to look up) until they have a leader
    told = set(waiting)
    if on_offline is not None and (unled := [tp for tp in waiting if cluster.leader(*tp) < 0]):
        on_offline(unled)
    patience_s = consumer.config.request_timeout_ms / 1000  # without `follow`: how long unreachable leaders are
    stuck_since: float | None = None  # waited for once nothing else is left to read
    readable = [tp for tp in tps if tp not in told]
    await consumer.assign(readable)
    plan = await start_positions(consumer, readable, spec, until) if readable else {}
    if on_clamped is not None and spec.kind == "absolute":
        for tp, (chosen, end) in plan.items():
            if chosen != spec.value:
                on_clamped(tp, spec.value, end)
    remaining = {tp for tp, (start, end) in plan.items() if start < end} if not follow else set(readable)
    ends = {tp: end for tp, (_, end) in plan.items()}
    t0 = time.perf_counter()
    checked = time.monotonic()

    async def take_back() -> None:
        """Assign the waiting partitions that have a leader again, from where `spec` says."""
        nonlocal checked
        checked = time.monotonic()
        with contextlib.suppress(KafkactlError, OSError):
            await cluster.refresh(sorted({t for t, _ in waiting}))
        back = [tp for tp in waiting if cluster.reachable_leader(*tp) >= 0]
        if not back:
            return
        try:
            await consumer.assign([*consumer.assignment, *back])
            found = await start_positions(consumer, back, spec, until)
        except ConsumeError as exc:  # gone again before its offsets were read: it waits on
            if exc.code != ErrorCode.LEADER_NOT_AVAILABLE:
                raise
            await consumer.assign([tp for tp in consumer.assignment if tp not in back])
            return
        for tp in back:
            waiting.remove(tp)
        for tp, (start, end) in found.items():
            ends[tp] = end
            if follow or start < end:
                remaining.add(tp)

    try:
        while True:
            if waiting and time.monotonic() - checked >= refresh_s:
                await take_back()
            if not follow:
                lost = [tp for tp in remaining if cluster.reachable_leader(*tp) < 0]
                if len(lost) == len(remaining) and (waiting or lost):
                    if waiting and not lost:  # one last look before giving up on them
                        await take_back()
                        if remaining or not waiting:
                            continue
                    unread = sorted({*waiting, *lost})
                    stuck_since = time.monotonic() if stuck_since is None else stuck_since
                    patient = [tp for tp in unread if not cluster.offline(tp)]  # a leader may yet be elected/reached
                    if not patient:
                        raise ConsumeError(f"{describe_partitions(unread)} not read: no leader (LEADER_NOT_AVAILABLE)",
                                           ErrorCode.LEADER_NOT_AVAILABLE)  # fmt: skip
                    if time.monotonic() - stuck_since >= patience_s:
                        raise ConsumeError(f"{describe_partitions(unread)} not read: no reachable leader within "
                                           f"{patience_s:g}s ({cluster.why_leaderless(unread)})",
                                           ErrorCode.LEADER_NOT_AVAILABLE)  # fmt: skip
                    if waiting:  # (the assigned ones are taken up by the consumer's own watcher)
                        await take_back()
                else:
                    stuck_since = None
                    if not remaining:
                        break
            new = [
                tp
                for tp in consumer.leaderless()
                if tp not in told and (follow or tp in remaining) and cluster.leader(*tp) < 0
            ]  # (an unreachable leader is told by cluster.waits)
            if new and on_offline is not None:
                told.update(new)
                on_offline(new)
            got = await consumer.getmany(timeout_ms=refresh_s * 1000 if waiting else 500, max_records=10_000)
            for tp, recs in got.items():
                if not follow:
                    end = ends[tp]
                    if recs[-1].offset >= end - 1:
                        recs = [r for r in recs if r.offset < end]
                        remaining.discard(tp)
                if match is not None:
                    recs = [r for r in recs if match(r)]
                if max_messages is not None and summary.messages + len(recs) >= max_messages:
                    recs = recs[: max_messages - summary.messages]
                    remaining.clear()
                    waiting.clear()
                    follow = False
                if recs:
                    summary.messages += len(recs)
                    summary.bytes += sum(len(r.value or b"") + len(r.key or b"") for r in recs)
                    summary.last[tp[1]] = recs[-1].offset
                    yield recs
                if not remaining and not follow:
                    break
            if not follow:  # read past its end with no record there: its last offsets were markers or aborted
                remaining -= {tp for tp in remaining if (pos := consumer.position(tp)) is not None and pos >= ends[tp]}
            if not follow and not remaining and not waiting:
                break
    finally:
        summary.seconds = time.perf_counter() - t0


# -- text output -------------------------------------------------------------------------------------

DECODERS = ("utf8", "hex", "base64", "json")


def decode_bytes(data: bytes | None, how: str, null: str = "", not_json: Callable[[], None] | None = None) -> str:
    """Bytes as text the way `how` says; with "json", bytes that are not JSON are shown as text and
    `not_json` is called."""
    if data is None:
        return null
    if how == "hex":
        return data.hex()
    if how == "base64":
        return base64.b64encode(data).decode()
    if how == "json":
        try:
            return json.dumps(json.loads(data), indent=2, ensure_ascii=False)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if not_json is not None:
                not_json()
    return data.decode("utf-8", "backslashreplace")


def iso_time(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds (`2026-11-25T21:02:03.456Z`); -1 stays -1."""
    if ms < 0:
        return str(ms)
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def compile_format(fmt: str, not_json: Callable[[], None] | None = None):
    """A function record → text for kcat's tokens: %t %p %o %k %s %h %T %K %S %%, and \\n \\t escapes, plus
    %I: the timestamp as an ISO-8601 UTC date-time with milliseconds (%T is kcat's epoch milliseconds)
    (`not_json`: called when a key or value to show as JSON is not JSON)."""
    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t")
    pieces: list[Any] = []
    i = 0
    lit = []
    while i < len(fmt):
        c = fmt[i]
        if c == "%" and i + 1 < len(fmt):
            tok = fmt[i + 1]
            if tok == "%":
                lit.append("%")
            elif tok in "tpoksThKSI":
                if lit:
                    pieces.append(("", "".join(lit)))
                    lit = []
                pieces.append((tok, ""))
            else:
                raise UsageError(f"--format: unknown token %{tok} (have %t %p %o %k %s %h %T %I %K %S)")
            i += 2
            continue
        lit.append(c)
        i += 1
    if lit:
        pieces.append(("", "".join(lit)))

    def render(r: ConsumerRecord, key_decoder: str = "utf8", value_decoder: str = "utf8") -> str:
        out = []
        for p, text in pieces:
            if not p:
                out.append(text)
            elif p == "t":
                out.append(r.topic)
            elif p == "p":
                out.append(str(r.partition))
            elif p == "o":
                out.append(str(r.offset))
            elif p == "k":
                out.append(decode_bytes(r.key, key_decoder, not_json=not_json))
            elif p == "s":
                out.append(decode_bytes(r.value, value_decoder, not_json=not_json))
            elif p == "I":
                out.append(iso_time(r.timestamp))
            elif p == "T":
                out.append(str(r.timestamp))
            elif p == "K":
                out.append("-1" if r.key is None else str(len(r.key)))
            elif p == "S":
                out.append("-1" if r.value is None else str(len(r.value)))
            elif p == "h":
                out.append(",".join(f"{k}={decode_bytes(v, 'utf8')}" for k, v in r.headers))
        return "".join(out)

    return render
