#!/usr/bin/env bash
# The README's second command: install everything the tests need, lint, and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,spark   # the spark extra: pyspark + pyarrow, for tests/spark
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# in parallel workers (pytest-xdist): tests sharing a broker or the Spark session stay on one (tests/conftest.py);
# four suit a 2-core machine, where most of a test is waiting on its brokers (3: 19.9 min, 4: 17.6 min from a
# clean clone). KAFKACTL_TEST_WORKERS=0: serial.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${KAFKACTL_TEST_WORKERS:-4}" --dist loadgroup "$@"
