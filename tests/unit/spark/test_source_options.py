"""parse_options (broker.spark.source): the data source's options as Spark's Kafka source reads them."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from broker.spark.source import OffsetBound, SourceError, SourceOptions, parse_options  # noqa: E402

BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def parse(**extra: str) -> SourceOptions:
    return parse_options({**BASE, **extra})


def refused(options: dict[str, str], *needles: str) -> str:
    with pytest.raises(SourceError) as info:
        parse_options(options)
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def test_defaults_are_sparks_batch_defaults():
    o = parse()
    assert o.bootstrap == "127.0.0.1:9092" and o.subscribe == ("t",)
    assert o.starting == OffsetBound("earliest") and o.ending == OffsetBound("latest")
    assert o.fail_on_data_loss is True and o.min_partitions is None and o.max_records_per_partition is None
    assert o.include_headers is True and o.poll_timeout_ms == 120_000 and o.consumer == {}
    assert o.starting_by_timestamp_strategy == "error"


def test_names_are_case_insensitive_and_kafka_prefix_accepted():
    o = parse_options({"KAFKA.BOOTSTRAP.SERVERS": " h:1,h:2 ", "SUBSCRIBE": " a, b ,a,,", "FailOnDataLoss": "FALSE",
                       "minpartitions": "4", "MAXRECORDSPERPARTITION": "1000"})  # fmt: skip
    assert o.bootstrap == "h:1,h:2" and o.subscribe == ("a", "b")
    assert o.fail_on_data_loss is False and o.min_partitions == 4 and o.max_records_per_partition == 1000


def test_bootstrap_is_optional_here_the_data_source_requires_it():
    assert parse_options({"subscribe": "t"}).bootstrap is None


@pytest.mark.parametrize("given", [{}, {"subscribe": "t", "subscribePattern": "t.*"},
                                   {"subscribe": "t", "assign": '{"t":[0]}'}])  # fmt: skip
def test_exactly_one_way_to_name_topics(given):
    refused({"bootstrap.servers": "h:1", **given}, "exactly one of", "subscribe, subscribePattern, assign")


def test_subscribe_pattern_and_assign():
    assert parse_options({"subscribePattern": "orders-.*"}).subscribe_pattern == "orders-.*"
    assert parse_options({"assign": '{"b":[1,0],"a":[2]}'}).assign == (("a", 2), ("b", 0), ("b", 1))
    refused({"subscribePattern": "(unclosed"}, "subscribePattern", "not a valid regular expression")
    refused({"subscribe": " , "}, "subscribe", "no topic")
    refused({"assign": '{"t":["0"]}'}, "assign", '{"topic":[0,1]}')
    refused({"assign": "[1]"}, "assign")


def test_starting_offsets_json_and_words():
    o = parse(startingOffsets='{"t":{"0":23,"1":-2}}', endingOffsets='{"t":{"0":50,"1":-1}}')
    assert o.starting == OffsetBound("offsets", {("t", 0): 23, ("t", 1): -2})
    assert o.ending == OffsetBound("offsets", {("t", 0): 50, ("t", 1): -1})
    assert parse(startingOffsets=" EARLIEST ", endingOffsets="Latest").starting == OffsetBound("earliest")


@pytest.mark.parametrize(("option", "value", "needles"), [
    ("startingOffsets", "latest", ("startingOffsets cannot be latest",)),
    ("endingOffsets", "earliest", ("endingOffsets cannot be earliest",)),
    ("startingOffsets", '{"t":{"0":-1}}', ("startingOffsets for t-0", "-1 (latest)")),
    ("endingOffsets", '{"t":{"0":-2}}', ("endingOffsets for t-0", "-2 (earliest)")),
    ("startingOffsets", '{"t":{"0":-3}}', ("startingOffsets for t-0", "-3")),
    ("startingOffsets", '{"t":{"0":"5"}}', ("startingOffsets for t-0",)),
    ("startingOffsets", '{"t":{"x":5}}', ("partition 'x'",)),
    ("startingOffsets", '{"t":[5]}', ('{"topic":{"0":23,"1":-2}}',)),
    ("startingOffsets", "{not json", ("startingOffsets",)),
    ("startingOffsets", "12", ("startingOffsets", "earliest, latest or JSON")),
    ("endingOffsets", "{}", ("endingOffsets", "no partition")),
])  # fmt: skip
def test_bad_offsets(option, value, needles):
    refused({**BASE, option: value}, *needles)


def test_timestamps_take_precedence_over_offsets():
    o = parse(startingOffsets='{"t":{"0":1}}', startingTimestamp="1700000000000",
              startingOffsetsByTimestamp='{"t":{"0":5}}', endingOffsetsByTimestamp='{"t":{"0":9}}')  # fmt: skip
    assert o.starting == OffsetBound("timestamp", 1_700_000_000_000)
    assert o.ending == OffsetBound("timestamps", {("t", 0): 9})
    assert parse(startingOffsetsByTimestampStrategy="LATEST").starting_by_timestamp_strategy == "latest"


@pytest.mark.parametrize(("option", "value"), [
    ("startingTimestamp", "yesterday"), ("endingTimestamp", "-5"), ("startingOffsetsByTimestamp", '{"t":{"0":"x"}}'),
    ("endingOffsetsByTimestamp", '{"t":{"0":-1}}'), ("startingOffsetsByTimestampStrategy", "earliest"),
])  # fmt: skip
def test_bad_timestamps(option, value):
    refused({**BASE, option: value}, option)


@pytest.mark.parametrize(("option", "value"), [
    ("failOnDataLoss", "yes"), ("minPartitions", "0"), ("minPartitions", "many"), ("maxRecordsPerPartition", "-1"),
    ("includeHeaders", "1"), ("kafkaConsumer.pollTimeoutMs", "0"), ("kafka.max.partition.fetch.bytes", "big"),
])  # fmt: skip
def test_bad_values_name_their_option(option, value):
    refused({**BASE, option: value}, option, repr(value))


def test_unknown_options_are_refused_known_spark_ones_ignored():
    refused({**BASE, "startingOffset": "earliest"}, "unknown option 'startingoffset'", "startingOffsets")
    o = parse(maxOffsetsPerTrigger="10", groupIdPrefix="x", **{"kafka.group.id": "g", "kafka.session.timeout.ms": "x"})
    assert o.consumer == {}


def test_kafka_consumer_settings_are_passed_on():
    o = parse(**{"kafka.max.partition.fetch.bytes": "2097152", "kafka.client.id": "spark",
                 "kafka.fetch.max.wait.ms": "50"})  # fmt: skip
    assert o.consumer == {"max_partition_fetch_bytes": 2097152, "client_id": "spark", "fetch_max_wait_ms": 50}


def test_security_settings_reach_the_consumers():
    from broker.client.security import ClientSecurity

    o = parse(**{"kafka.security.protocol": "sasl_plaintext", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                 "kafka.sasl.username": "alice", "kafka.sasl.password": "pw"})  # fmt: skip
    assert o.consumer["security"] == ClientSecurity(protocol="SASL_PLAINTEXT", mechanism="SCRAM-SHA-512",
                                                    username="alice", password="pw")  # fmt: skip
    assert "security" not in parse().consumer
    refused({**BASE, "kafka.security.protocol": "TLS"}, "kafka.security.protocol='TLS': expected one of")
    refused({**BASE, "kafka.ssl.ca.location": "/nonexistent/ca.pem"}, "kafka.ssl.ca.location: cannot read")


def test_spark_load_passes_the_drivers_security_to_its_executors():
    from broker.client import security
    from broker.spark.job import source_options
    from broker.spark.plan import Plan, RangeResult

    sec = security.ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice",
                                                   "sasl.password": "pw"})  # fmt: skip
    before = security.default()
    security.set_default(sec)
    try:
        plan = Plan("load", None, [RangeResult("t", 0, 0, 10)], [("t", 0, 0, 10)], "h:1")  # type: ignore[arg-type]
        opts = source_options(plan)
    finally:
        security.set_default(before)
    assert {k: v for k, v in opts.items() if k.startswith("kafka.")} == {
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.username": "alice", "kafka.sasl.password": "pw"
    }  # fmt: skip
    assert parse_options(opts).consumer["security"] == sec
