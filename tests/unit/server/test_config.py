"""Broker configuration: Java properties parsing, the keys and defaults of docs/configuration.md, precedence
rules, errors."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker.errors import KafkactlError, UsageError
from broker.log.config import LogConfig
from broker.server.config import (
    DEFAULTS,
    IGNORED,
    MAX_LONG,
    BrokerConfig,
    log_config_for,
    parse_listeners,
    parse_override,
    parse_properties,
    parse_protocol_map,
    topic_config_error,
    with_first_port,
)

HOUR = 3_600_000


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Default log dirs land under KAFKACTL_HOME: keep them out of the real home."""
    monkeypatch.setenv("KAFKACTL_HOME", str(tmp_path / "home"))


def load(tmp_path: Path, text: str | None = None, **overrides: str) -> BrokerConfig:
    file = None
    if text is not None:
        file = tmp_path / "server.properties"
        file.write_text(text)
    return BrokerConfig.load(file, {k.replace("_", "."): v for k, v in overrides.items()})


# --- parse_properties -------------------------------------------------------------------------


def test_separators() -> None:
    text = "a=1\nb: 2\nc 3\nd = 4\ne : 5\nf\t6\ng=\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": ""}


def test_first_separator_wins_and_values_keep_theirs() -> None:
    assert parse_properties("listeners=PLAINTEXT://host:9092") == {"listeners": "PLAINTEXT://host:9092"}
    assert parse_properties("zookeeper.connect: zk1:2181,zk2:2181/kafka") == {
        "zookeeper.connect": "zk1:2181,zk2:2181/kafka"
    }
    assert parse_properties("a=b=c") == {"a": "b=c"}
    assert parse_properties("a:b=c") == {"a": "b=c"}


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        ("zookeeper.connect localhost:2181", "zookeeper.connect", "localhost:2181"),
        ("listeners PLAINTEXT://h:9092", "listeners", "PLAINTEXT://h:9092"),
        ("log.dirs /data/a,/data/b=x", "log.dirs", "/data/a,/data/b=x"),
    ],
)
def test_whitespace_separator_with_colon_or_equals_in_the_value(line: str, key: str, value: str) -> None:
    # java.util.Properties: the key ends at the first unescaped '=', ':' or whitespace, whichever comes first
    assert parse_properties(line) == {key: value}


def test_comments_and_blank_lines() -> None:
    text = "# comment\n! also a comment\n\n   \n  # indented comment\nkey=value # not a comment\n\t\n"
    assert parse_properties(text) == {"key": "value # not a comment"}


def test_continuations() -> None:
    text = "listeners=PLAINTEXT://a:1,\\\n    PLAINTEXT://b:2\nnext=1\n"
    assert parse_properties(text) == {"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2", "next": "1"}
    assert parse_properties("a=1\\\n2\\\n3\nb=4") == {"a": "123", "b": "4"}


def test_comment_lines_do_not_continue() -> None:
    # java.util.Properties: "a comment line cannot be extended" by a trailing backslash
    assert parse_properties("# a comment ending in a backslash \\\nbroker.id=3\n") == {"broker.id": "3"}


def test_surrounding_whitespace_and_later_keys_win() -> None:
    assert parse_properties("  key  =  value  \nkey=second\n") == {"key": "second"}


def test_line_without_separator_is_a_key_with_an_empty_value() -> None:
    # as java.util.Properties reads it; BrokerConfig then judges the key and the empty value
    assert parse_properties("a=1\n\nlonelykey\n", "server.properties") == {"a": "1", "lonelykey": ""}


def test_line_without_a_key_is_an_error_naming_source_and_line() -> None:
    with pytest.raises(UsageError, match=r"server\.properties:3: expected key=value"):
        parse_properties("a=1\n\n=value\n", "server.properties")


def test_parse_override() -> None:
    assert parse_override("log.retention.hours=1") == ("log.retention.hours", "1")
    assert parse_override(" a = b=c ") == ("a", "b=c")
    assert parse_override("a=") == ("a", "")
    for bad in ("novalue", "=x", " =x"):
        with pytest.raises(UsageError, match="expected key=value"):
            parse_override(bad)


# --- defaults ---------------------------------------------------------------------------------

#: docs/configuration.md "Broker": key → default (None: no default / derived)
CONFIG_MD = {
    "broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:9092", "zookeeper.connect": "localhost:2181",
    "zookeeper.session.timeout.ms": "18000", "num.partitions": "1", "default.replication.factor": "1",
    "min.insync.replicas": "1", "auto.create.topics.enable": "true", "delete.topic.enable": "true",
    "log.segment.bytes": "1073741824", "log.roll.hours": "168", "log.retention.hours": "168",
    "log.retention.bytes": "-1", "log.retention.check.interval.ms": "300000",
    "log.flush.interval.messages": "9223372036854775807", "log.flush.scheduler.interval.ms": "9223372036854775807",
    "log.index.interval.bytes": "4096", "log.index.size.max.bytes": "10485760",
    "num.recovery.threads.per.data.dir": "1", "message.max.bytes": "1048588", "socket.request.max.bytes": "104857600",
    "socket.send.buffer.bytes": "102400", "socket.receive.buffer.bytes": "102400", "queued.max.requests": "500",
    "num.replica.fetchers": "1", "replica.lag.time.max.ms": "30000", "replica.fetch.max.bytes": "1048576",
    "replica.fetch.wait.max.ms": "500", "max.incremental.fetch.session.cache.slots": "1000",
    "unclean.leader.election.enable": "false",
    "controlled.shutdown.enable": "true", "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000", "group.max.session.timeout.ms": "1800000",
    # the defaults of the other topic-level keys (Kafka 2.8's)
    "compression.type": "producer", "log.message.timestamp.difference.max.ms": "9223372036854775807",
    "log.roll.jitter.hours": "0", "log.cleanup.policy": "delete", "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.min.compaction.lag.ms": "0", "log.cleaner.max.compaction.lag.ms": "9223372036854775807",
    "log.cleaner.min.cleanable.ratio": "0.5", "log.segment.delete.delay.ms": "60000", "log.preallocate": "false",
    "log.message.format.version": "2.8-IV1", "log.message.downconversion.enable": "true",
}  # fmt: skip
CONFIG_MD_NO_DEFAULT = ["port", "advertised.listeners", "log.dirs", "zookeeper.connection.timeout.ms", "log.roll.ms",
                        "log.retention.minutes", "log.retention.ms", "log.flush.interval.ms",
                        "log.roll.jitter.ms"]  # fmt: skip
CONFIG_MD_IGNORED = ["num.network.threads", "num.io.threads", "background.threads"]


def test_defaults_are_config_mds() -> None:
    for key, value in CONFIG_MD.items():
        assert DEFAULTS[key] == value, key
    for key in CONFIG_MD_NO_DEFAULT:
        assert key in DEFAULTS and DEFAULTS[key] is None, key
    assert set(CONFIG_MD_IGNORED) <= IGNORED


def test_every_config_md_key_is_accepted(tmp_path: Path) -> None:
    values = {"port": "9093", "advertised.listeners": "PLAINTEXT://adv:1", "log.dirs": str(tmp_path / "d"),
              "zookeeper.connection.timeout.ms": "100", "log.roll.ms": "1000", "log.retention.minutes": "5",
              "log.retention.ms": "1000", "log.flush.interval.ms": "1000",
              **{k: "3" for k in CONFIG_MD_IGNORED}, **CONFIG_MD}  # fmt: skip
    c = BrokerConfig.load(None, values)
    assert c.explicit == frozenset(values)


def test_load_without_anything(tmp_path: Path) -> None:
    c = BrokerConfig.load()
    assert c.broker_id == 0
    assert (c.host, c.port) == ("127.0.0.1", 9092)
    assert (c.advertised_host, c.advertised_port) == ("127.0.0.1", 9092)
    assert c.log_dirs == [tmp_path / "home" / "broker-0"]
    assert c.zookeeper_connect == "localhost:2181"
    assert c.zk_session_timeout_ms == 18000 and c.zk_connection_timeout_ms == 18000
    assert (c.num_partitions, c.default_replication_factor, c.min_insync_replicas) == (1, 1, 1)
    assert c.auto_create_topics is True and c.delete_topic_enable is True
    assert c.retention_check_interval_ms == 300000
    assert c.flush_scheduler_interval_ms == MAX_LONG
    assert c.socket_request_max_bytes == 104857600
    # socket buffers: only sizes set on purpose are applied (-1: the OS default, which keeps autotuning)
    assert (c.socket_send_buffer_bytes, c.socket_receive_buffer_bytes) == (-1, -1)
    assert c.props["socket.send.buffer.bytes"] == c.props["socket.receive.buffer.bytes"] == "102400"
    assert c.queued_max_requests == 500
    assert c.explicit == frozenset()
    assert c.log == LogConfig(
        segment_bytes=1073741824, segment_ms=168 * HOUR, index_interval_bytes=4096, index_max_bytes=10485760,
        flush_messages=MAX_LONG, flush_ms=MAX_LONG, retention_ms=168 * HOUR, retention_bytes=-1,
        max_message_bytes=1048588, message_timestamp_type="CreateTime",
    )  # fmt: skip
    # props keep every defaulted key as text (DescribeConfigs shows them)
    assert c.props["log.retention.hours"] == "168" and "log.retention.ms" not in c.props


def test_file_and_overrides(tmp_path: Path) -> None:
    text = "broker.id=4\nnum.partitions: 3\nzookeeper.connect=localhost:2182/kafka\nlog.segment.bytes 1000\n"
    c = load(tmp_path, text, num_partitions="7", delete_topic_enable="false")
    assert c.broker_id == 4
    assert c.num_partitions == 7  # the override wins over the file
    assert c.delete_topic_enable is False
    assert c.zookeeper_connect == "localhost:2182/kafka"
    assert c.log.segment_bytes == 1000
    assert c.explicit == {"broker.id", "num.partitions", "zookeeper.connect", "log.segment.bytes",
                          "delete.topic.enable"}  # fmt: skip
    assert c.props["num.partitions"] == "7"
    assert c.log_dirs == [tmp_path / "home" / "broker-4"]  # the default dir follows the broker id


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KafkactlError, match="cannot read config file"):
        BrokerConfig.load(tmp_path / "nope.properties")


@pytest.mark.parametrize("where", ["file", "override"])
def test_unknown_key_is_an_error_naming_it(tmp_path: Path, where: str) -> None:
    with pytest.raises(KafkactlError, match=r"unknown configuration key 'log\.retention\.hourz'"):
        if where == "file":
            load(tmp_path, "log.retention.hourz=1\n")
        else:
            BrokerConfig.load(None, {"log.retention.hourz": "1"})


def test_ignored_keys_are_accepted_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="broker.server.config"):
        c = load(tmp_path, "num.network.threads=3\nnum.io.threads=8\n", background_threads="10",
                 offsets_topic_replication_factor="1")  # fmt: skip
    assert c.broker_id == 0
    logged = " ".join(r.getMessage() for r in caplog.records)
    for key in ("num.network.threads", "num.io.threads", "background.threads", "offsets.topic.replication.factor"):
        assert key in logged


# --- listeners --------------------------------------------------------------------------------


def test_listeners(tmp_path: Path) -> None:
    c = load(tmp_path, listeners="PLAINTEXT://10.0.0.5:19092")
    assert (c.host, c.port) == ("10.0.0.5", 19092)
    assert (c.advertised_host, c.advertised_port) == ("10.0.0.5", 19092)


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_wildcard_listener_advertises_loopback(tmp_path: Path, host: str) -> None:
    h = f"[{host}]" if ":" in host else host
    c = load(tmp_path, listeners=f"PLAINTEXT://{h}:9000")
    assert (c.host, c.port) == (host, 9000)
    assert (c.advertised_host, c.advertised_port) == ("127.0.0.1", 9000)


def test_empty_listener_host(tmp_path: Path) -> None:
    c = load(tmp_path, listeners="PLAINTEXT://:9001")
    assert (c.host, c.port) == ("127.0.0.1", 9001)


def test_advertised_listeners(tmp_path: Path) -> None:
    c = load(tmp_path, listeners="PLAINTEXT://0.0.0.0:9092", advertised_listeners="PLAINTEXT://broker1.example:9094")
    assert (c.host, c.port) == ("0.0.0.0", 9092)
    assert (c.advertised_host, c.advertised_port) == ("broker1.example", 9094)


def test_port_without_listeners(tmp_path: Path) -> None:
    c = load(tmp_path, port="9095")
    assert (c.host, c.port) == ("127.0.0.1", 9095)
    assert (c.advertised_host, c.advertised_port) == ("127.0.0.1", 9095)
    c = load(tmp_path, "port=9096\nhost.name=10.1.1.1\n")
    assert (c.host, c.port) == ("10.1.1.1", 9096)


def test_listeners_win_over_port(tmp_path: Path) -> None:
    c = load(tmp_path, "port=1111\nlisteners=PLAINTEXT://h:2222\n")
    assert (c.host, c.port) == ("h", 2222)


MAP = parse_protocol_map(DEFAULTS["listener.security.protocol.map"])


def test_parse_listeners() -> None:
    assert [(x.name, x.protocol, x.host, x.port) for x in parse_listeners("PLAINTEXT://h:1", MAP)] == [
        ("PLAINTEXT", "PLAINTEXT", "h", 1)
    ]
    assert parse_listeners("plaintext://h:1", MAP)[0].name == "PLAINTEXT"
    got = parse_listeners(" PLAINTEXT://[::1]:2 , SSL://x:3,SASL_SSL://:4", MAP)
    assert [(x.name, x.protocol, x.host, x.port) for x in got] == [
        ("PLAINTEXT", "PLAINTEXT", "::1", 2), ("SSL", "SSL", "x", 3), ("SASL_SSL", "SASL_SSL", "127.0.0.1", 4),
    ]  # fmt: skip
    assert str(got[0]) == "PLAINTEXT://[::1]:2" and got[1].tls and not got[1].sasl and got[2].tls and got[2].sasl
    bad_cases = [
        ("h:1", "is not NAME://host:port"),
        ("INTERNAL://h:1", "listener INTERNAL has no security protocol: add INTERNAL:<protocol>"),
        ("PLAINTEXT://h:port", "port is not a number"),
        ("PLAINTEXT://h", "port is not a number"),
        ("PLAINTEXT://h:70000", "not a TCP port"),
        ("PLAINTEXT://h:1,plaintext://h:2", "listener PLAINTEXT is given twice"),
        ("", "no listener"),
    ]
    for bad, match in bad_cases:
        with pytest.raises(KafkactlError, match=match):
            parse_listeners(bad, MAP)


def test_protocol_map() -> None:
    assert parse_protocol_map("internal:ssl, EXTERNAL:SASL_PLAINTEXT") == {"INTERNAL": "SSL",
                                                                           "EXTERNAL": "SASL_PLAINTEXT"}  # fmt: skip
    for bad in ("INTERNAL", "INTERNAL:TLS", ":SSL"):
        with pytest.raises(KafkactlError, match="is not NAME:PROTOCOL"):
            parse_protocol_map(bad)


def test_custom_listener_names(tmp_path: Path) -> None:
    c = load(tmp_path, listeners="INTERNAL://0.0.0.0:9094,EXTERNAL://:9095", ssl_keystore_location="/k.pem",
             listener_security_protocol_map="INTERNAL:SSL,EXTERNAL:SASL_PLAINTEXT",
             inter_broker_listener_name="internal")  # fmt: skip
    assert [(x.name, x.protocol) for x in c.listeners] == [("INTERNAL", "SSL"), ("EXTERNAL", "SASL_PLAINTEXT")]
    assert (c.host, c.port) == ("0.0.0.0", 9094)
    assert [str(x) for x in c.advertised.values()] == ["INTERNAL://127.0.0.1:9094", "EXTERNAL://127.0.0.1:9095"]
    assert str(c.inter_broker_listener) == "INTERNAL://127.0.0.1:9094"
    with pytest.raises(KafkactlError, match="listener INTERNAL has no security protocol"):
        load(tmp_path, listeners="INTERNAL://:9094")


def test_inter_broker_listener(tmp_path: Path) -> None:
    both = "PLAINTEXT://:9092,SSL://:9093"
    assert load(tmp_path, listeners=both, ssl_keystore_location="k").inter_broker_listener_name == "PLAINTEXT"
    c = load(tmp_path, listeners=both, ssl_keystore_location="k", security_inter_broker_protocol="SSL")
    assert c.inter_broker_listener.name == "SSL"
    with pytest.raises(KafkactlError, match="no PLAINTEXT listener for the brokers to talk to each other"):
        load(tmp_path, listeners="SSL://:9093", ssl_keystore_location="k")
    with pytest.raises(KafkactlError, match=r"inter.broker.listener.name=SASL_SSL: not an advertised listener"):
        load(tmp_path, listeners=both, ssl_keystore_location="k", inter_broker_listener_name="SASL_SSL")
    with pytest.raises(KafkactlError, match="set only one of"):
        load(tmp_path, listeners=both, ssl_keystore_location="k", inter_broker_listener_name="SSL",
             security_inter_broker_protocol="SSL")  # fmt: skip


def test_advertised_listeners_by_name(tmp_path: Path) -> None:
    c = load(tmp_path, listeners="PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9093", ssl_keystore_location="k",
             advertised_listeners="SSL://b1.example:19093,PLAINTEXT://b1.example:19092")  # fmt: skip
    assert str(c.advertised["SSL"]) == "SSL://b1.example:19093"
    assert (c.advertised_host, c.advertised_port) == ("b1.example", 19093)  # the first one given
    with pytest.raises(KafkactlError, match="listener SASL_SSL is not one of listeners"):
        load(tmp_path, advertised_listeners="SASL_SSL://h:1")


def test_tls_keys_and_per_listener_overrides(tmp_path: Path) -> None:
    per_listener = (
        "listener.name.sasl_ssl.ssl.keystore.location=/sasl.pem\nlistener.name.sasl_ssl.ssl.client.auth=none\n"
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=scram\n"
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=scram-sha-256\n"
    )
    c = load(tmp_path, per_listener, listeners="PLAINTEXT://:9092,SSL://:9093,SASL_SSL://:9094",
             ssl_keystore_location="/all.pem", ssl_client_auth="requested", ssl_truststore_location="/ca.pem",
             ssl_key_password="pw", ssl_cipher_suites="ECDHE-RSA-AES128-GCM-SHA256",
             ssl_enabled_protocols="TLSv1.3")  # fmt: skip
    ssl = c.tls("SSL")
    assert (ssl.keystore, ssl.truststore, ssl.client_auth) == ("/all.pem", "/ca.pem", "requested")
    assert ssl.key_password == "pw"
    assert ssl.protocols == ("TLSv1.3",) and ssl.ciphers == "ECDHE-RSA-AES128-GCM-SHA256"
    sasl = c.tls("SASL_SSL")
    assert (sasl.keystore, sasl.client_auth, sasl.truststore) == ("/sasl.pem", "none", "/ca.pem")
    assert c.jaas_config("SASL_SSL", "SCRAM-SHA-256") == "scram" and c.jaas_config("SSL", "PLAIN") is None
    assert c.sasl_mechanisms("SASL_SSL") == ["SCRAM-SHA-256"]
    assert c.sasl_mechanisms("SSL") == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert c.props["sasl.mechanism.inter.broker.protocol"] == "PLAIN"


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"listeners": "SSL://:9093", "inter.broker.listener.name": "SSL"}, "listener SSL .SSL. needs ssl.keystore"),
        ({"ssl.client.auth": "always"}, "ssl.client.auth=always: expected none, requested or required"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "'TLSv1.1' is not served"),
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type=JKS: only PEM"),
        ({"listener.name.ssl.ssl.bogus": "1"}, "unknown configuration key 'listener.name.ssl.ssl.bogus'"),
    ],
)
def test_security_config_errors(overrides: dict[str, str], match: str) -> None:
    with pytest.raises(KafkactlError, match=match):
        BrokerConfig.load(None, overrides)


def test_with_first_port() -> None:
    assert with_first_port("PLAINTEXT://127.0.0.1:9092", 9100) == "PLAINTEXT://127.0.0.1:9100"
    assert with_first_port("SSL://[::1]:1, PLAINTEXT://h:2", 5) == "SSL://[::1]:5,PLAINTEXT://h:2"


@pytest.mark.parametrize("key", ["listeners", "advertised.listeners"])
def test_bad_listener_in_config(tmp_path: Path, key: str) -> None:
    with pytest.raises(KafkactlError, match="listener"):
        BrokerConfig.load(None, {key: "SASL_SSL://h:1"})


# --- log dirs ---------------------------------------------------------------------------------


def test_log_dirs(tmp_path: Path) -> None:
    c = load(tmp_path, log_dirs=f"{tmp_path}/a,{tmp_path}/b,,")
    assert c.log_dirs == [tmp_path / "a", tmp_path / "b"]
    c = load(tmp_path, log_dir=str(tmp_path / "single"))
    assert c.log_dirs == [tmp_path / "single"]
    c = load(tmp_path, f"log.dir={tmp_path}/old\nlog.dirs={tmp_path}/new\n")
    assert c.log_dirs == [tmp_path / "new"]  # log.dirs wins over log.dir, as in Kafka


def test_log_dirs_tilde(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load(tmp_path, log_dirs="~/k").log_dirs == [tmp_path / "k"]


def test_log_dirs_whitespace_around_commas(tmp_path: Path) -> None:
    # Kafka's list-typed keys split on "\s*,\s*": spaces after the commas are not part of the paths
    c = load(tmp_path, log_dirs=f"{tmp_path}/a, {tmp_path}/b")
    assert c.log_dirs == [tmp_path / "a", tmp_path / "b"]


# --- retention and roll -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, 168 * HOUR),
        ({"log.retention.hours": "2"}, 2 * HOUR),
        ({"log.retention.minutes": "3"}, 180_000),
        ({"log.retention.ms": "1234"}, 1234),
        ({"log.retention.hours": "2", "log.retention.minutes": "3"}, 180_000),
        ({"log.retention.hours": "2", "log.retention.ms": "5"}, 5),
        ({"log.retention.minutes": "3", "log.retention.ms": "5"}, 5),
        ({"log.retention.hours": "2", "log.retention.minutes": "3", "log.retention.ms": "5"}, 5),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-1"}, -1),
        ({"log.retention.ms": "0"}, 0),
    ],
)
def test_retention_finest_unit_wins(given: dict[str, str], expected: int) -> None:
    assert BrokerConfig.load(None, given).log.retention_ms == expected


def test_retention_order_does_not_matter_between_file_and_overrides(tmp_path: Path) -> None:
    c = load(tmp_path, "log.retention.ms=10\n", log_retention_hours="5")
    assert c.log.retention_ms == 10


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, 168 * HOUR), ({"log.roll.hours": "1"}, HOUR), ({"log.roll.ms": "500"}, 500),
     ({"log.roll.hours": "1", "log.roll.ms": "500"}, 500)],
)  # fmt: skip
def test_roll_ms_wins_over_hours(given: dict[str, str], expected: int) -> None:
    assert BrokerConfig.load(None, given).log.segment_ms == expected


def test_other_log_settings() -> None:
    c = BrokerConfig.load(None, {"log.flush.interval.ms": "200", "log.flush.interval.messages": "10",
                                 "log.retention.bytes": "4096", "message.max.bytes": "100",
                                 "log.index.interval.bytes": "128", "log.index.size.max.bytes": "4096",
                                 "log.message.timestamp.type": "LogAppendTime"})  # fmt: skip
    assert c.log.flush_ms == 200 and c.log.flush_messages == 10
    assert c.log.retention_bytes == 4096 and c.log.max_message_bytes == 100
    assert c.log.index_interval_bytes == 128 and c.log.index_max_bytes == 4096
    assert c.log.message_timestamp_type == "LogAppendTime"


def test_socket_buffers_set_on_purpose() -> None:
    c = BrokerConfig.load(None, {"socket.send.buffer.bytes": "65536", "socket.receive.buffer.bytes": "-1"})
    assert (c.socket_send_buffer_bytes, c.socket_receive_buffer_bytes) == (65536, -1)
    with pytest.raises(KafkactlError, match="socket.send.buffer.bytes='big'"):
        BrokerConfig.load(None, {"socket.send.buffer.bytes": "big"})


def test_connection_timeout_follows_session_timeout() -> None:
    c = BrokerConfig.load(None, {"zookeeper.session.timeout.ms": "6000"})
    assert c.zk_session_timeout_ms == 6000 and c.zk_connection_timeout_ms == 6000
    c = BrokerConfig.load(None, {"zookeeper.session.timeout.ms": "6000", "zookeeper.connection.timeout.ms": "100"})
    assert c.zk_connection_timeout_ms == 100


def test_connections_max_idle_ms() -> None:
    """Kafka's default, 10 minutes; any negative value means never (Kafka's Selector reads it so)."""
    assert DEFAULTS["connections.max.idle.ms"] == "600000"
    assert BrokerConfig.load().connections_max_idle_ms == 600000
    assert BrokerConfig.load(None, {"connections.max.idle.ms": "1500"}).connections_max_idle_ms == 1500
    for never in ("-1", "-600000"):
        assert BrokerConfig.load(None, {"connections.max.idle.ms": never}).connections_max_idle_ms == -1
    with pytest.raises(KafkactlError, match=r"connections[.]max[.]idle[.]ms=0: expected a positive number"):
        BrokerConfig.load(None, {"connections.max.idle.ms": "0"})
    with pytest.raises(KafkactlError, match=r"connections[.]max[.]idle[.]ms='10m': not an integer"):
        BrokerConfig.load(None, {"connections.max.idle.ms": "10m"})


# --- bad values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["broker.id", "num.partitions", "log.retention.hours", "log.retention.minutes", "log.retention.ms",
     "log.roll.ms", "log.roll.hours", "log.segment.bytes", "zookeeper.session.timeout.ms", "port",
     "socket.request.max.bytes", "log.flush.interval.ms", "message.max.bytes"],
)  # fmt: skip
@pytest.mark.parametrize("bad", ["abc", "1.5", "12ms"])
def test_bad_integer_names_the_key(key: str, bad: str) -> None:
    with pytest.raises(KafkactlError, match=rf"config {key.replace('.', r'[.]')}='{bad}': not an integer"):
        BrokerConfig.load(None, {key: bad})


@pytest.mark.parametrize("key", ["auto.create.topics.enable", "delete.topic.enable"])
@pytest.mark.parametrize("bad", ["yes", "1", ""])
def test_bad_boolean_names_the_key(key: str, bad: str) -> None:
    with pytest.raises(KafkactlError, match=rf"config {key.replace('.', r'[.]')}="):
        BrokerConfig.load(None, {key: bad})


def test_booleans_are_case_insensitive() -> None:
    assert BrokerConfig.load(None, {"auto.create.topics.enable": "FALSE"}).auto_create_topics is False
    assert BrokerConfig.load(None, {"delete.topic.enable": "True"}).delete_topic_enable is True


def test_bad_timestamp_type() -> None:
    with pytest.raises(KafkactlError, match="log.message.timestamp.type='Now'"):
        BrokerConfig.load(None, {"log.message.timestamp.type": "Now"})


# --- topic-level config -----------------------------------------------------------------------


def test_topic_config_error() -> None:
    assert topic_config_error({}) is None
    assert topic_config_error({"retention.ms": "1000", "cleanup.policy": "delete", "segment.bytes": "14",
                               "message.timestamp.type": "LogAppendTime", "min.insync.replicas": "2",
                               "segment.index.bytes": "4096", "flush.ms": "1", "flush.messages": "1",
                               "max.message.bytes": "10", "index.interval.bytes": "1", "segment.ms": "1",
                               "retention.bytes": "1"}) is None  # fmt: skip
    err = topic_config_error({"retention.ms": "1", "retention.hours": "1"})
    assert err == "Unknown topic config name: retention.hours"  # (Kafka's words)
    assert topic_config_error({"cleanup.policy": "compact"}) is None  # (the log cleaner compacts it)
    assert topic_config_error({"cleanup.policy": "compact,delete"}) is None
    err = topic_config_error({"message.timestamp.type": "Whenever"})
    assert err == ("Invalid value Whenever for configuration message.timestamp.type: String must be one of: "
                   "CreateTime, LogAppendTime")  # fmt: skip
    err = topic_config_error({"retention.ms": "7d"})
    assert err == "Invalid value 7d for configuration retention.ms: Not a number of type LONG"
    err = topic_config_error({"segment.bytes": None})  # type: ignore[dict-item]
    assert err is not None and "segment.bytes" in err
    # the keys the controller and `topic reassign --throttle` read: `topic alter` must keep them
    assert topic_config_error({"unclean.leader.election.enable": "true", "follower.replication.throttled.replicas":
                               "0:3,1:3", "leader.replication.throttled.replicas": "*"}) is None  # fmt: skip
    err = topic_config_error({"unclean.leader.election.enable": "yes"})
    assert err is not None and "Expected value to be either true or false" in err
    err = topic_config_error({"follower.replication.throttled.replicas": "0-3"})
    assert err is not None and "[partitionId]:[brokerId]" in err


#: every topic-level key of Kafka 2.8 with a good value and a bad one (and the words of its refusal)
KAFKA_2_8_TOPIC_KEYS = {
    "cleanup.policy": ("delete", "shred", "String must be one of: compact, delete"),
    "compression.type": ("zstd", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    "delete.retention.ms": ("0", "-1", "Value must be at least 0"),
    "file.delete.delay.ms": ("1000", "soon", "Not a number of type LONG"),
    "flush.messages": ("1", "0", "Value must be at least 1"),
    "flush.ms": ("1000", "-5", "Value must be at least 0"),
    "follower.replication.throttled.replicas": ("0:1,1:2", "0:x", "[partitionId]:[brokerId]"),
    "leader.replication.throttled.replicas": ("*", "*,0:1", "[partitionId]:[brokerId]"),
    "index.interval.bytes": ("0", "4096.5", "Not a number of type INT"),
    "max.compaction.lag.ms": ("86400000", "0", "Value must be at least 1"),
    "max.message.bytes": ("2048", "3000000000", "Not a number of type INT"),
    "message.downconversion.enable": ("FALSE", "no", "Expected value to be either true or false"),
    "message.format.version": ("2.8-IV1", "3.0", "Version `3.0` is not a valid version"),
    "message.timestamp.difference.max.ms": ("60000", "-1", "Value must be at least 0"),
    "message.timestamp.type": ("LogAppendTime", "logappendtime", "String must be one of: CreateTime, LogAppendTime"),
    "min.cleanable.dirty.ratio": ("0.1", "1.5", "Value must be no more than 1"),
    "min.compaction.lag.ms": ("100", "-1", "Value must be at least 0"),
    "min.insync.replicas": ("2", "0", "Value must be at least 1"),
    "preallocate": ("true", "yes", "Expected value to be either true or false"),
    "retention.bytes": ("-1", "1GB", "Not a number of type LONG"),
    "retention.ms": ("-1", "-2", "Value must be at least -1"),
    "segment.bytes": ("1048576", "13", "Value must be at least 14"),
    "segment.index.bytes": ("4096", "3", "Value must be at least 4"),
    "segment.jitter.ms": ("1000", "-1", "Value must be at least 0"),
    "segment.ms": ("3600000", "0", "Value must be at least 1"),
    "unclean.leader.election.enable": ("true", "1", "Expected value to be either true or false"),
}


def test_every_kafka_2_8_topic_key_is_known_and_checked() -> None:
    assert set(BrokerConfig.TOPIC_DEFAULTS) == set(KAFKA_2_8_TOPIC_KEYS)
    for key, (good, bad, why) in KAFKA_2_8_TOPIC_KEYS.items():
        assert topic_config_error({key: good}) is None, key
        err = topic_config_error({key: bad})
        assert err == f"Invalid value {bad} for configuration {key}: {why}" or (err and why in err), (key, err)
        assert "\n" not in err


def test_message_format_versions_as_kafka_parses_them() -> None:
    for good in ("0.8.0", "0.10.0", "0.10.0-IV1", "0.10.2.1", "0.11.0", "1.0", "1.0.2", "2.1-IV2", "2.8", "2.8.1"):
        assert topic_config_error({"message.format.version": good}) is None, good
    for bad in ("0.7", "2.9", "2.8-IV2", "", "latest"):
        assert topic_config_error({"message.format.version": bad}) is not None, bad


def test_compaction_lags_checked_together() -> None:
    err = topic_config_error({"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "10"})
    assert err == "conflict topic config setting min.compaction.lag.ms (100) > max.compaction.lag.ms (10)"
    defaults = BrokerConfig.load(None, {"log.cleaner.max.compaction.lag.ms": "50"}).topic_defaults()
    assert topic_config_error({"min.compaction.lag.ms": "60"}, defaults) is not None
    assert topic_config_error({"min.compaction.lag.ms": "60", "max.compaction.lag.ms": "60"}, defaults) is None


def test_broker_defaults_of_topic_keys_are_checked_as_the_topic_key() -> None:
    with pytest.raises(KafkactlError, match="Invalid value brotli for configuration compression.type"):
        BrokerConfig.load(None, {"compression.type": "brotli"})
    with pytest.raises(KafkactlError, match="configuration log.cleaner.min.cleanable.ratio"):
        BrokerConfig.load(None, {"log.cleaner.min.cleanable.ratio": "2"})
    with pytest.raises(KafkactlError, match="configuration log.cleanup.policy"):
        BrokerConfig.load(None, {"log.cleanup.policy": "shred"})
    compacting = BrokerConfig.load(None, {"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": "0.2"})
    assert compacting.log.compact and not compacting.log.delete and compacting.log.min_cleanable_dirty_ratio == 0.2
    c = BrokerConfig.load(None, {"compression.type": "gzip", "log.roll.jitter.hours": "1",
                                 "log.message.timestamp.difference.max.ms": "5000"})  # fmt: skip
    assert (c.log.compression_type, c.log.target_codec, c.log.segment_jitter_ms) == ("gzip", 1, 3_600_000)
    assert c.log.message_timestamp_difference_max_ms == 5000 and c.log.checks_batches
    d = c.topic_defaults()
    assert (d["compression.type"], d["segment.jitter.ms"], d["message.timestamp.difference.max.ms"]) == (
        "gzip", "3600000", "5000")  # fmt: skip
    assert c.topic_default_is_static("compression.type") and c.topic_default_is_static("segment.jitter.ms")
    assert not c.topic_default_is_static("retention.ms") and not c.topic_default_is_static("preallocate")


def test_log_config_checks_batches_only_when_asked() -> None:
    assert not LogConfig().checks_batches and LogConfig().target_codec == -1
    assert log_config_for(LogConfig(), {"compression.type": "zstd"}).target_codec == 4
    assert log_config_for(LogConfig(), {"compression.type": "uncompressed"}).checks_batches
    assert log_config_for(LogConfig(), {"message.timestamp.difference.max.ms": "10"}).checks_batches
    assert not log_config_for(LogConfig(), {"compression.type": "producer", "preallocate": "true"}).checks_batches


def test_topic_keys_of_config_md_are_known() -> None:
    keys = [
        "cleanup.policy",
        "retention.ms",
        "retention.bytes",
        "segment.bytes",
        "segment.ms",
        "min.insync.replicas",
        "max.message.bytes",
        "message.timestamp.type",
        "flush.messages",
        "flush.ms",
        "index.interval.bytes",
    ]
    assert set(keys) <= set(BrokerConfig.TOPIC_DEFAULTS)


def test_log_config_for() -> None:
    base = LogConfig()
    got = log_config_for(base, {"retention.ms": "1000", "segment.bytes": "2048", "cleanup.policy": "delete",
                                "min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"})  # fmt: skip
    assert got.retention_ms == 1000 and got.segment_bytes == 2048
    assert got.message_timestamp_type == "LogAppendTime"
    assert got.segment_ms == base.segment_ms and got.max_message_bytes == base.max_message_bytes
    assert base.retention_ms == 168 * HOUR  # the base is not changed
    assert log_config_for(base, {}) == base


def test_topic_defaults(tmp_path: Path) -> None:
    c = BrokerConfig.load(None, {"log.retention.minutes": "10", "log.roll.ms": "777", "min.insync.replicas": "2",
                                 "message.max.bytes": "5000"})  # fmt: skip
    d = c.topic_defaults()
    assert d == {
        "cleanup.policy": "delete", "segment.bytes": "1073741824", "segment.ms": "777", "retention.ms": "600000",
        "retention.bytes": "-1", "max.message.bytes": "5000", "message.timestamp.type": "CreateTime",
        "flush.messages": str(MAX_LONG), "flush.ms": str(MAX_LONG), "index.interval.bytes": "4096",
        "segment.index.bytes": "10485760", "min.insync.replicas": "2", "unclean.leader.election.enable": "false",
        "leader.replication.throttled.replicas": "", "follower.replication.throttled.replicas": "",
        "segment.jitter.ms": "0", "delete.retention.ms": "86400000", "min.compaction.lag.ms": "0",
        "max.compaction.lag.ms": str(MAX_LONG), "file.delete.delay.ms": "60000", "min.cleanable.dirty.ratio": "0.5",
        "compression.type": "producer", "preallocate": "false", "message.format.version": "2.8-IV1",
        "message.timestamp.difference.max.ms": str(MAX_LONG), "message.downconversion.enable": "true",
    }  # fmt: skip
    assert set(d) == set(BrokerConfig.TOPIC_DEFAULTS)
    assert topic_config_error(d) is None  # defaults are valid overrides
    assert log_config_for(c.log, d) == c.log  # and applying them changes nothing


def test_the_log_cleaner_keys_are_checked() -> None:
    for key, value, why in (("log.cleaner.threads", "abc", "not an integer"),
                            ("log.cleaner.threads", "0", "at least 1"), ("log.cleaner.backoff.ms", "-1", "at least 0"),
                            ("log.cleaner.io.max.bytes.per.second", "fast", "a positive number")):  # fmt: skip
        with pytest.raises(KafkactlError, match=why):
            BrokerConfig.load(None, {key: value})
    assert BrokerConfig.load(None, {"log.cleaner.threads": "2"}).props["log.cleaner.threads"] == "2"
