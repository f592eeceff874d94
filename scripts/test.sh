#!/usr/bin/env bash
# The README's second command: install everything the tests need, lint, and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,spark   # the spark extra: pyspark + pyarrow, for tests/spark
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
