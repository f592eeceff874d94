"""`kafkactl schema-registry` against real clients: confluent-kafka's SchemaRegistryClient, AvroSerializer and
AvroDeserializer work against it unchanged, `kafkactl produce --value-schema` and `consume --value-decoder
avro` interoperate with them, compatibility levels are enforced, and the schemas outlive the registry
process (kill -9) because ZooKeeper holds them."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from broker.daemon import free_port, wait_port
from tests.integration.helpers import cli, cli_env, error_line, json_lines, ok

pytest.importorskip("confluent_kafka.schema_registry.avro")

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

USER_V1 = {"type": "record", "name": "User", "namespace": "shop",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"},
                      {"name": "email", "type": ["null", "string"], "default": None},
                      {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]}  # fmt: skip
USER_V2 = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "plan", "type": "string", "default": "free"}]}
USER_BAD = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "plan", "type": "string"}]}  # no default


class Registry:
    """`kafkactl schema-registry start` as a child process on a free port."""

    def __init__(self, zk: str, home: Path) -> None:
        self.zk, self.home, self.port = zk, home, free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Registry:
        self.proc = subprocess.Popen([sys.executable, "-m", "kafkactl", "schema-registry", "start", "-z", self.zk,
                                      "--port", str(self.port)], env=cli_env(self.home),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        assert wait_port("127.0.0.1", self.port, 30), self.proc.stdout.read() if self.proc.poll() is not None else ""
        return self

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture
def registry(zk_chroot, tmp_path):
    r = Registry(zk_chroot, tmp_path / "home").start()
    yield r
    if r.proc is not None and r.proc.poll() is None:
        r.stop()


def ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def read_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                out.append(m.value())
    finally:
        consumer.close()
    return out


def test_confluent_clients_and_kafkactl_share_avro_through_the_registry(registry, broker, tmp_path):
    client = SchemaRegistryClient({"url": registry.url})
    serializer = AvroSerializer(client, json.dumps(USER_V1))
    users = [{"name": f"u{i}", "age": 20 + i, "email": None if i % 2 else f"u{i}@x", "tags": ["a"] * i}
             for i in range(5)]  # fmt: skip
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for u in users:
        producer.produce("users", key=u["name"].encode(), value=serializer(u, ctx("users")))
    assert producer.flush(10) == 0
    (sid,) = {client.get_latest_version("users-value").schema_id}

    # kafkactl decodes what confluent-kafka wrote, fetching the schema by the id in each value
    out = ok(cli("consume", "users", "-b", broker.bootstrap, "-e", "--value-decoder", "avro",
                 "--schema-registry", registry.url))  # fmt: skip
    assert [json.loads(line) for line in out.splitlines()] == users

    # and confluent-kafka decodes what kafkactl wrote with --value-schema (the same schema: the same id)
    schema_file = tmp_path / "user.avsc"
    schema_file.write_text(json.dumps(USER_V1))
    lines = "".join(json.dumps(u) + "\n" for u in users)
    ok(cli("produce", "users2", "--value-schema", schema_file, "--schema-registry", registry.url, "-b",
           broker.bootstrap, input_text=lines))  # fmt: skip
    values = read_values(broker.bootstrap, "users2", 5)
    assert all(v[0] == 0 and int.from_bytes(v[1:5], "big") == sid for v in values)
    deserializer = AvroDeserializer(client)
    assert [deserializer(v, ctx("users2")) for v in values] == users
    assert client.get_subjects() == ["users-value", "users2-value"]

    # a line that does not fit the schema is one error line naming it; nothing after it is sent
    bad = json.dumps(users[0]) + "\n" + json.dumps({"name": "x", "age": "old"}) + "\n" + json.dumps(users[1]) + "\n"
    r = cli("produce", "users3", "--value-schema", schema_file, "--schema-registry", registry.url, "-b",
            broker.bootstrap, input_text=bad)  # fmt: skip
    assert r.returncode != 0 and "line 2: the value does not fit the schema" in r.stderr and "Traceback" not in r.stderr
    r = cli("produce", "users3", "--value-schema", schema_file, "--schema-registry", "http://127.0.0.1:1", "-b",
            broker.bootstrap, input_text=lines)  # fmt: skip
    error_line(r, "cannot reach the schema registry at http://127.0.0.1:1")

    # values that are not Avro are shown as they are, with one note
    ok(cli("produce", "users", "-b", broker.bootstrap, input_text="plain text\n"))
    r = cli("consume", "users", "-b", broker.bootstrap, "-e", "--value-decoder", "avro", "--schema-registry",
            registry.url, "-o", "json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json_lines(r.stdout)[-1]["value"] == "plain text"
    assert r.stderr.count("not Avro") == 1


def test_compatibility_levels_are_enforced_and_versions_kept(registry):
    client = SchemaRegistryClient({"url": registry.url})
    v1 = client.register_schema("users-value", Schema(json.dumps(USER_V1), "AVRO"))
    assert client.register_schema("users-value", Schema(json.dumps(USER_V1), "AVRO")) == v1  # the same: no version
    assert client.get_versions("users-value") == [1]
    assert client.test_compatibility("users-value", Schema(json.dumps(USER_V2), "AVRO"))
    assert not client.test_compatibility("users-value", Schema(json.dumps(USER_BAD), "AVRO"))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("users-value", Schema(json.dumps(USER_BAD), "AVRO"))
    assert refused.value.http_status_code == 409 and "plan" in refused.value.error_message
    v2 = client.register_schema("users-value", Schema(json.dumps(USER_V2), "AVRO"))
    assert v2 != v1 and client.get_versions("users-value") == [1, 2]
    # the same schema under another subject keeps its id
    assert client.register_schema("other-value", Schema(json.dumps(USER_V2), "AVRO")) == v2

    # FORWARD: the latest must read the new one's data; removing a field without a default breaks it
    assert client.set_compatibility("users-value", "FORWARD") == {"compatibility": "FORWARD"}
    dropped = {**USER_V2, "fields": [f for f in USER_V2["fields"] if f["name"] != "age"]}
    assert not client.test_compatibility("users-value", Schema(json.dumps(dropped), "AVRO"))
    assert client.set_compatibility("users-value", "NONE") == {"compatibility": "NONE"}
    assert client.test_compatibility("users-value", Schema(json.dumps(dropped), "AVRO"))
    assert registry.call("GET", "/config/users-value") == (200, {"compatibilityLevel": "NONE"})
    assert registry.call("GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    for bad in ("SIDEWAYS", None, 3):
        status, body = registry.call("PUT", "/config", {"compatibility": bad})
        assert status == 422 and body["error_code"] == 42203
    assert registry.call("GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    # a request whose body length cannot be read is answered, and the server serves on
    with socket.create_connection(("127.0.0.1", registry.port), timeout=10) as s:
        s.sendall(b"POST /subjects/x-value/versions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
    assert registry.call("GET", "/subjects/users-value/versions")[0] == 200

    # versions, lookups and ids as Confluent's registry answers them
    status, latest = registry.call("GET", "/subjects/users-value/versions/latest")
    assert status == 200 and (latest["version"], latest["id"]) == (2, v2)
    assert json.loads(latest["schema"]) == USER_V2
    status, found = registry.call("POST", "/subjects/users-value", {"schema": json.dumps(USER_V1)})
    assert (status, found["version"], found["id"]) == (200, 1, v1)
    assert registry.call("GET", f"/schemas/ids/{v1}/versions") == (200, [{"subject": "users-value", "version": 1}])
    assert registry.call("GET", "/subjects/nobody/versions")[1]["error_code"] == 40401
    assert registry.call("GET", "/subjects/users-value/versions/9")[1]["error_code"] == 40402
    assert registry.call("GET", "/schemas/ids/999")[1]["error_code"] == 40403
    status, body = registry.call("POST", "/subjects/x-value/versions", {"schema": '{"type": "recrod"}'})
    assert status == 422 and body["error_code"] == 42201
    status, body = registry.call("POST", "/subjects/x-value/versions", {"schema": "not json"})
    assert status == 422 and body["error_code"] == 42201

    # soft delete hides, permanent delete (after a soft one) removes; the id stays readable
    assert registry.call("DELETE", "/subjects/other-value") == (200, [1])
    assert registry.call("GET", "/subjects")[1] == ["users-value"]
    assert registry.call("GET", "/subjects?deleted=true")[1] == ["other-value", "users-value"]
    assert registry.call("DELETE", "/subjects/users-value?permanent=true")[1]["error_code"] == 40405
    assert registry.call("DELETE", "/subjects/other-value?permanent=true") == (200, [1])
    assert registry.call("GET", f"/schemas/ids/{v2}")[0] == 200


def test_schemas_outlive_a_killed_registry_and_two_registries_agree(registry, zk_chroot, tmp_path):
    client = SchemaRegistryClient({"url": registry.url})
    sid = client.register_schema("users-value", Schema(json.dumps(USER_V1), "AVRO"))
    assert registry.stop(signal.SIGKILL) == -9
    again = Registry(zk_chroot, tmp_path / "home").start()
    other = Registry(zk_chroot, tmp_path / "home2").start()
    try:
        for r in (again, other):
            status, body = r.call("GET", "/subjects/users-value/versions/1")
            assert status == 200 and body["id"] == sid and json.loads(body["schema"]) == USER_V1
        # registering through either one hands out distinct ids, never one twice
        ids = set()
        for i in range(6):
            r = (again, other)[i % 2]
            schema = {"type": "record", "name": f"T{i}", "fields": [{"name": "f", "type": "int"}]}
            status, body = r.call("POST", f"/subjects/t{i}-value/versions", {"schema": json.dumps(schema)})
            assert status == 200
            ids.add(body["id"])
        assert len(ids) == 6 and sid not in ids
    finally:
        assert again.stop() == 0 and other.stop() == 0
