"""The Spark side of a load: step 3 of the commit protocol (`broker.spark.commit`), and a Spark session.

`run_job` reads the plan's splits through the `kafkactl` data source (`build_frame`, which checks every row
against its split) and writes them into the load's staging dir (`write_frame`); for Parquet of raw values
without --partition-by, `broker.spark.arrow_writer` does both in each task with Arrow alone.

Value formats: `raw` keeps key and value as binary; `utf8` casts key, value and header values to
strings; `json` does the same and parses the value too, with a schema Spark infers from a
sample (the first `JSON_SAMPLE` non-null values of the load) plus a `_corrupt_record` string field
that keeps the text of a value that does not fit the schema — no value is ever dropped. CSV holds no
binary or nested columns: binary key/value become base64 text, headers and parsed JSON values JSON
text. JSON and CSV timestamps are written in UTC.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from broker.client import security as client_security
from broker.home import home_dir
from broker.spark.commit import SUCCESS, OutputDir, remove_tree
from broker.spark.errors import SparkLoadError
from broker.spark.plan import Plan

JSON_SAMPLE = 1000
#: kafkactl.render.progress's shape: (description, total) -> a context manager yielding advance(n=1)
Progress = Callable[[str, int], contextlib.AbstractContextManager[Callable[[int], None]]]


def _offsets_json(plan: Plan, which: str) -> str:
    out: dict[str, dict[str, int]] = {}
    for r in plan.ranges:
        out.setdefault(r.topic, {})[str(r.partition)] = r.start if which == "start" else r.end
    return json.dumps(out, separators=(",", ":"))


def _assign_json(plan: Plan) -> str:
    out: dict[str, list[int]] = {}
    for r in plan.ranges:
        out.setdefault(r.topic, []).append(r.partition)
    return json.dumps(out, separators=(",", ":"))


def source_options(plan: Plan) -> dict[str, str]:
    """The `kafkactl` data source's options that read exactly the plan's splits, in order."""
    opts = {
        "bootstrap.servers": plan.bootstrap,
        "assign": _assign_json(plan),
        "startingOffsets": _offsets_json(plan, "start"),
        "endingOffsets": _offsets_json(plan, "end"),
        "failOnDataLoss": "true" if plan.fail_on_data_loss else "false",
    }
    for key, value in client_security.default().to_properties().items():  # executors connect as the driver does
        opts[f"kafka.{key}"] = value
    if plan.min_partitions:
        opts["minPartitions"] = str(plan.min_partitions)
    if plan.max_records_per_file:
        opts["maxRecordsPerPartition"] = str(plan.max_records_per_file)
    return opts


def build_frame(spark: Any, plan: Plan) -> Any:
    """The DataFrame a load writes: the plan's rows, converted to the layout, checked against their split."""
    from pyspark.sql import functions as F

    reader = spark.read.format("kafkactl")
    for k, v in source_options(plan).items():
        reader = reader.option(k, v)
    df = reader.load()
    # input partition i must hold split i's offsets only: the file names depend on it
    idx = F.spark_partition_id() + 1
    t_arr = F.array(*[F.lit(s[0]) for s in plan.splits])
    p_arr = F.array(*[F.lit(s[1]).cast("int") for s in plan.splits])
    s_arr = F.array(*[F.lit(s[2]).cast("long") for s in plan.splits])
    e_arr = F.array(*[F.lit(s[3]).cast("long") for s in plan.splits])
    inside = (
        (F.col("topic") == F.element_at(t_arr, idx))
        & (F.col("partition") == F.element_at(p_arr, idx))
        & (F.col("offset") >= F.element_at(s_arr, idx))
        & (F.col("offset") < F.element_at(e_arr, idx))
    )
    offset = F.when(inside, F.col("offset")).otherwise(F.raise_error(F.concat(
        F.lit("kafkactl spark-load: row "), F.col("topic"), F.lit("-"), F.col("partition").cast("string"),
        F.lit("@"), F.col("offset").cast("string"), F.lit(" read by input partition "),
        F.spark_partition_id().cast("string"), F.lit(", outside its planned range"))))  # fmt: skip

    layout = plan.layout
    key, value, headers = F.col("key"), F.col("value"), F.col("headers")
    if layout.value_format in ("utf8", "json", "avro"):
        key = key.cast("string")
        if layout.value_format != "avro":
            value = value.cast("string")
        headers = F.transform(
            "headers", lambda h: F.struct(h["key"].alias("key"), h["value"].cast("string").alias("value"))
        )
    if layout.value_format == "json":
        value = F.from_json(value, _json_schema(spark, df), {"mode": "PERMISSIVE"})
    if layout.value_format == "avro":
        from broker.spark import avro

        value = avro.value_column(value, plan.schema_registry, plan.reader_schema)
    if layout.format == "csv":  # flat columns only
        if layout.value_format == "raw":
            key, value = F.base64(key), F.base64(value)
        elif layout.value_format in ("json", "avro"):
            value = F.to_json(value)
        headers = F.to_json(headers)
    cols = [key.alias("key"), value.alias("value"), F.col("topic"), F.col("partition"), offset.alias("offset"),
            F.col("timestamp"), F.col("timestampType"), headers.alias("headers")]  # fmt: skip
    if "date" in layout.partition_by:
        cols.append(F.date_format(F.col("timestamp"), "yyyy-MM-dd").alias("date"))
    if "hour" in layout.partition_by:
        cols.append(F.date_format(F.col("timestamp"), "HH").alias("hour"))
    return df.select(*cols)


def _json_schema(spark: Any, df: Any) -> Any:
    """A struct schema for JSON values, inferred by Spark from a sample, plus `_corrupt_record`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    sample = [r[0] for r in df.select(F.col("value").cast("string")).where(F.col("value").isNotNull())
              .limit(JSON_SAMPLE).collect()]  # fmt: skip
    fields = []
    if sample:
        inferred = spark.read.json(spark.sparkContext.parallelize(sample, 1)).schema
        fields = [f for f in inferred.fields if f.name != "_corrupt_record"]
        if not fields:
            raise SparkLoadError("--value-format json: the sampled values are not JSON objects "
                                 "(use --value-format utf8)")  # fmt: skip
    return StructType([*fields, StructField("_corrupt_record", StringType(), True)])


def write_frame(df: Any, plan: Plan, staging: Path) -> None:
    layout = plan.layout
    writer = df.write.format(layout.format).mode("errorifexists").option("maxRecordsPerFile", 0)
    if layout.format in ("json", "csv"):
        writer = writer.option("compression", "none").option("timeZone", "UTC")
        writer = writer.option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
    if layout.format == "csv":
        writer = writer.option("header", "true").option("escape", '"')
    if layout.partition_by:
        writer = writer.partitionBy(*layout.partition_by)
    writer.save(staging.as_uri())


class _ProgressPoller:
    """Polls Spark's status tracker for the completed tasks of one job group; `advance(n)` with each increase."""

    def __init__(self, spark: Any, group: str, advance: Callable[[int], None], interval: float = 0.25) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.group, self.advance, self.interval = group, advance, interval
        self.reported = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="spark-load-progress", daemon=True)

    def completed(self) -> int:
        done = 0
        for job_id in self.tracker.getJobIdsForGroup(self.group):
            job = self.tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = self.tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
        return done

    def _report(self, done: int) -> None:
        if done > self.reported:
            self.advance(done - self.reported)
            self.reported = done

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval):
            try:
                self._report(self.completed())
            except Exception:  # the JVM going away mid-poll: progress is best effort
                return

    def __enter__(self) -> _ProgressPoller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(5)


def spark_error_line(exc: BaseException) -> str:
    """One line for a failed Spark job: the innermost Python error when there is one, without Spark's
    error class and SQLSTATE decorations."""
    text = str(exc).split("JVM stacktrace:")[0]
    found = None
    for line in text.splitlines():
        m = re.match(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$", line)
        if m:
            found = (m.group(1), m.group(2).strip())
    if found:
        name, line = found
        if not name.endswith("Error") or name in ("KafkactlError", "SparkLoadError", "DataLossError", "SourceError",
                                                   "CorruptDataError", "AdminError", "ConsumeError"):  # fmt: skip
            name = ""
    else:
        name, line = "", next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    line = re.sub(r"^\[[A-Z_.]+\]\s*", "", line)
    line = re.sub(r"\s*SQLSTATE: \w+\.?$", "", line).strip()
    return f"{name}: {line}" if name else line


def run_job(spark: Any, out: OutputDir, plan: Plan, progress: Progress | None = None) -> None:
    """Step 3: read the plan's splits and write them to the staging dir (Spark writes _SUCCESS last)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    from broker.spark import arrow_writer  # pyarrow: the loader itself imports without it (broker.spark)

    staging = out.staging(plan.load_id)
    if (staging / SUCCESS).exists():
        return
    remove_tree(staging)  # a previous attempt of this very plan in this process
    sc = spark.sparkContext
    conf_key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(conf_key, None)
    spark.conf.set(conf_key, "TIMESTAMP_MICROS")
    fast = arrow_writer.applies(plan.layout)
    try:
        if not fast:
            sc.setJobGroup(f"{plan.load_id}-sample", f"kafkactl spark-load {plan.load_id}: JSON schema sample")
            df = build_frame(spark, plan)
        sc.setJobGroup(plan.load_id, f"kafkactl spark-load {plan.load_id}")
        bar = progress or (lambda description, total: contextlib.nullcontext(lambda n=1: None))
        rows = sum(r.expected for r in plan.ranges)
        with bar(f"loading {rows} offset(s) in {len(plan.splits)} split(s)", len(plan.splits)) as advance:
            with _ProgressPoller(spark, plan.load_id, advance) as poller:
                if fast:  # Parquet of raw values: each task reads and writes its split with Arrow alone
                    arrow_writer.write_splits(spark, plan, staging)
                else:
                    write_frame(df, plan, staging)
            poller._report(len(plan.splits))
    except (PySparkException, Py4JError) as exc:
        raise SparkLoadError(f"the Spark job failed: {spark_error_line(exc)}") from exc
    finally:
        with contextlib.suppress(Exception):
            sc.setLocalProperty("spark.jobGroup.id", None)
            if before is None:
                spark.conf.unset(conf_key)
            else:
                spark.conf.set(conf_key, before)
    if not (staging / SUCCESS).exists():
        raise SparkLoadError(f"the Spark job of load {plan.load_id} ended without writing {staging / SUCCESS}")


# --- a Spark session for the command line -------------------------------------------------------


@contextlib.contextmanager
def spark_session(master: str = "local[*]", log_path: Path | None = None,
                  conf: dict[str, str] | None = None) -> Iterator[Any]:  # fmt: skip
    """A SparkSession with the `kafkactl` source registered; the JVM's stderr goes to `log_path`; `conf`: Spark
    settings (spark-submit's --conf), over kafkactl's own."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkLoadError("spark-load needs pyspark and pyarrow: pip install 'kafkactl[spark]'") from None
    from broker.spark.source import register

    shadow = _local_spark_home(master)
    saved = None
    if log_path is not None:  # the JVM inherits fd 2 while it starts: its log goes to the file, for good
        log_path.parent.mkdir(parents=True, exist_ok=True)
        saved = os.dup(2)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stderr.flush()
        os.dup2(fd, 2)
        os.close(fd)
    try:
        builder = (SparkSession.builder.master(master).appName("kafkactl spark-load")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.session.timeZone", "UTC"))  # fmt: skip
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        if shadow is not None:  # read once, by the JVM as it starts
            os.environ["SPARK_HOME"] = str(shadow)
        try:
            spark = builder.getOrCreate()
        except Exception as exc:
            raise SparkLoadError(f"cannot start Spark (master {master}): {spark_error_line(exc)}"
                                 + (f"; see {log_path}" if log_path else "")) from None  # fmt: skip
    finally:
        if shadow is not None:
            os.environ.pop("SPARK_HOME", None)
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
    try:
        spark.sparkContext.setLogLevel("WARN")
        register(spark)
        yield spark
    finally:
        spark.stop()


def _local_spark_home(master: str) -> Path | None:
    """A SPARK_HOME of links to pip's pyspark minus its python/ directory, for a local master; else None.

    Spark puts $SPARK_HOME/python/lib/pyspark.zip first on every Python worker's path, and Python
    compiles what it imports from a zip anew in every process: some 3 s per worker start, and a Python
    data source read starts several kinds of worker (lookup, create, plan, read). Without the zip the
    workers, which run this same Python, import the installed, byte-compiled pyspark. Only for local
    masters: YARN ships pyspark.zip to its executors from SPARK_HOME. Made once per pyspark install,
    under $KAFKACTL_HOME/spark-home/, and kept.
    """
    same_python = os.environ.get("PYSPARK_PYTHON") == sys.executable
    if not master.startswith("local") or "SPARK_HOME" in os.environ or not same_python:
        return None
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "python" / "lib" / "pyspark.zip").is_file() or not (home / "bin" / "spark-submit").is_file():
        return None
    key = hashlib.sha256(f"{home}\0{pyspark.__version__}".encode()).hexdigest()[:16]
    shadow = home_dir() / "spark-home" / f"{pyspark.__version__}-{key}"
    if shadow.is_dir():
        return shadow
    try:
        shadow.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=".building-", dir=shadow.parent))
    except OSError:  # nowhere to keep it: Spark's own home, slower
        return None
    for entry in home.iterdir():
        if entry.name != "python":
            (building / entry.name).symlink_to(entry)
    try:
        building.rename(shadow)
    except OSError:  # another load made it first
        shutil.rmtree(building, ignore_errors=True)
    return shadow if shadow.is_dir() else None
