"""The loader's errors (`kafkactl spark-load`), raised by its planning, commit and Spark job alike.

The data source's own errors (`SourceError` and its kind) are in `broker.spark.options`, `ranges` and `read`.
"""

from __future__ import annotations

from broker.errors import KafkactlError


class SparkLoadError(KafkactlError):
    """A load that cannot go on (the message is the one line the user sees)."""


class DataLossError(SparkLoadError):
    """Offsets to load are gone from the log (retention), with failOnDataLoss on."""
