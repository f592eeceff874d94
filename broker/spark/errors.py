"""The loader's errors (`kafkactl spark-load`), raised by its planning, commit and Spark job alike.

The data source's own errors (`SourceError` and its kind) are in `broker.spark.options` and `read`;
`DataLossError`, here, is both: the loader's planning and the data source's reads raise the one class.
"""

from __future__ import annotations

from broker.errors import KafkactlError
from broker.spark.options import SourceError


class SparkLoadError(KafkactlError):
    """A load that cannot go on (the message is the one line the user sees)."""


class DataLossError(SparkLoadError, SourceError):
    """Offsets to load or read are gone from the log (retention removed them), with failOnDataLoss on;
    `failOnDataLoss=false` (`--no-fail-on-data-loss`) skips them."""

    __module__ = "broker.spark.source"  # the data source's public name, as users see and catch it
