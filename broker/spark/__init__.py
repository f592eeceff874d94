"""Spark for kafkactl: the `kafkactl` PySpark data source (`source`) and the resumable loader (`load`).

``register(spark)`` makes ``spark.read.format("kafkactl")`` available in a session; see `source` for
the options.
"""

from broker.spark.source import (
    ARROW_SCHEMA,
    FORMAT,
    SCHEMA,
    CorruptDataError,
    DataLossError,
    KafkactlDataSource,
    OffsetRange,
    SourceError,
    SourceOptions,
    columns_to_arrow,
    parse_options,
    plan_ranges,
    read_range,
    records_to_arrow,
    register,
    split_ranges,
)

__all__ = [
    "ARROW_SCHEMA",
    "FORMAT",
    "SCHEMA",
    "CorruptDataError",
    "DataLossError",
    "KafkactlDataSource",
    "OffsetRange",
    "SourceError",
    "SourceOptions",
    "columns_to_arrow",
    "parse_options",
    "plan_ranges",
    "read_range",
    "records_to_arrow",
    "register",
    "split_ranges",
]
