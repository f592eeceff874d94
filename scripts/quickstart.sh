#!/usr/bin/env bash
# The README's first command: install what is missing, then run the main job.
# Today the main job is the storage round trip: 256 MiB of record batches appended to a partition
# log with a CRC check of each, then read back through the sendfile slice API. (A broker with
# embedded ZooKeeper, a topic and a produce/consume round trip replace it as they land.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/kafkactl --version
.venv/bin/kafkactl bench log --size 256MiB
