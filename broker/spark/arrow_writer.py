"""The load's fast path: each split read and written to Parquet by its own Spark task, with Arrow alone.

For the common layout (Parquet, raw values, no --partition-by), a load needs nothing of Spark SQL: the
rows go out as they were fetched. Through the `kafkactl` data source, every row crosses from Arrow in the
Python worker to Spark's JVM rows and back to columns for the Parquet writer. The JVM's side of that
cost five times the fetching and decoding. Here Spark only schedules: one task per split reads it
(`broker.spark.source.read_range`) and writes it with pyarrow to
`<staging>/part-<split>-<load id>.c000.snappy.parquet`, the name Spark's writer would give it. The
task writes a hidden temporary file first and renames it only once it is complete, so a task run again
(a lost executor) replaces its file whole. The driver writes `_SUCCESS` once every task has finished.
The rest of the load (manifest, final names, row counts, commit) is the same for both paths. The
columns and Parquet types are those Spark writes for the layout. The footer also carries Spark's own
schema, so Spark reads the files as it reads its own.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from broker.log.checkpoint import fsync_dir

#: Spark's description of the output columns, which it keeps in the footer of the Parquet files it writes
_SPARK_KEY = "org.apache.spark.sql.parquet.row.metadata"
_SPARK_SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "key", "type": "binary", "nullable": True, "metadata": {}},
    {"name": "value", "type": "binary", "nullable": True, "metadata": {}},
    {"name": "topic", "type": "string", "nullable": True, "metadata": {}},
    {"name": "partition", "type": "integer", "nullable": True, "metadata": {}},
    {"name": "offset", "type": "long", "nullable": True, "metadata": {}},
    {"name": "timestamp", "type": "timestamp", "nullable": True, "metadata": {}},
    {"name": "timestampType", "type": "integer", "nullable": True, "metadata": {}},
    {"name": "headers", "type": {"type": "array", "elementType": {"type": "struct", "fields": [
        {"name": "key", "type": "string", "nullable": True, "metadata": {}},
        {"name": "value", "type": "binary", "nullable": True, "metadata": {}}]}, "containsNull": True},
     "nullable": True, "metadata": {}},
]})  # fmt: skip


def applies(layout: Any) -> bool:
    """Whether a load of this layout takes the fast path."""
    return layout.format == "parquet" and layout.value_format == "raw" and not layout.partition_by


def write_splits(spark: Any, plan: Any, staging: Path) -> list[int]:
    """Run one task per split of `plan`, each writing its Parquet file into `staging`; then `_SUCCESS`. Returns
    the rows each split wrote."""
    splits = list(enumerate(plan.splits))
    bootstrap, fail, load_id = plan.bootstrap, plan.fail_on_data_loss, plan.load_id
    staged = str(staging)
    rows = (spark.sparkContext.parallelize(splits, len(splits))
            .map(lambda item: write_split(bootstrap, item[0], tuple(item[1]), staged, load_id, fail))
            .collect())  # fmt: skip
    success = staging / "_SUCCESS"
    with open(success, "wb") as f:
        os.fsync(f.fileno())
    fsync_dir(staging)
    return rows


def write_split(bootstrap: str, index: int, split: tuple[str, int, int, int], staging: str, load_id: str,
                fail_on_data_loss: bool) -> int:  # fmt: skip
    """One task: read the split, write its file (none for a split without records); returns its rows."""
    from broker.spark.source import OffsetRange, read_range

    topic, partition, start, end = split
    final = Path(staging) / f"part-{index:05d}-{load_id}.c000.snappy.parquet"
    temp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")  # one per attempt, on any host
    Path(staging).mkdir(parents=True, exist_ok=True)
    writer: pq.ParquetWriter | None = None
    rows = 0
    try:
        for batch in read_range(bootstrap, OffsetRange(topic, partition, start, end),
                                fail_on_data_loss=fail_on_data_loss):  # fmt: skip
            if writer is None:
                schema = batch.schema.with_metadata({_SPARK_KEY: _SPARK_SCHEMA})
                writer = pq.ParquetWriter(temp, schema, compression="snappy", coerce_timestamps="us",
                                          use_compliant_nested_type=True)  # fmt: skip
            writer.write_batch(batch)
            rows += batch.num_rows
    except BaseException:
        if writer is not None:
            writer.close()
        temp.unlink(missing_ok=True)
        raise
    if writer is None:
        return 0
    writer.close()
    with open(temp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(temp, final)
    return rows
