"""`broker.spark.load` imports without pyspark and pyarrow; the data source's names need them."""

from __future__ import annotations

import subprocess
import sys

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('pyspark', 'pyarrow'):
            raise ImportError('no ' + name)
sys.meta_path.insert(0, Block())
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True, timeout=60)


def test_the_loader_imports_without_pyspark():
    r = _run("import broker.spark.load, broker.spark; print(broker.spark.load.FORMATS)")
    assert r.returncode == 0, r.stderr
    assert "parquet" in r.stdout


def test_the_source_names_need_pyspark_when_used():
    r = _run("from broker.spark import register")
    assert r.returncode != 0 and "ImportError: no py" in r.stderr


def test_an_unknown_name_is_an_attribute_error():
    r = _run("import broker.spark\ntry:\n    broker.spark.nothing\nexcept AttributeError as e:\n    print(e)")
    assert r.returncode == 0 and "no attribute 'nothing'" in r.stdout
