"""Spark for kafkactl: the `kafkactl` PySpark data source (`source`) and the resumable loader (`load`).

``register(spark)`` makes ``spark.read.format("kafkactl")`` available in a session; see `source` for
the options. The source's names are imported on first use: `source` needs pyspark and pyarrow, and
`load` (finishing or rolling back a half-done load, say) must import without them.
"""

from __future__ import annotations

from typing import Any

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


def __getattr__(name: str) -> Any:
    if name in __all__:
        from broker.spark import source

        return getattr(source, name)
    raise AttributeError(f"module 'broker.spark' has no attribute {name!r}")
