#!/usr/bin/env bash
# The README's first command: install what is missing, then run the main job: a broker with its
# embedded, real ZooKeeper (started because none answers on localhost:2181), a topic, and a produce
# and consume round trip in which every key and value that went in must come out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh spark   # pyspark + pyarrow for `kafkactl spark-load` (Java comes with the system packages)
K=.venv/bin/kafkactl
B=127.0.0.1:9092
$K --version
$K broker start --daemon                      # broker 0 on 127.0.0.1:9092, data in ~/.local/share/kafkactl
trap '$K broker stop' EXIT                    # a clean shutdown; the private ZooKeeper stops with it
topic="quickstart-$(date +%s)"
$K topic create "$topic" --partitions 3 -b $B
seq 1 10000 | sed 's/.*/key-&:value-&/' | $K produce "$topic" -K: --acks all -b $B
$K topic describe "$topic" -b $B
want=$(seq 1 10000 | sed 's/.*/key-&:value-&/' | sort)
got=$($K consume "$topic" --offset beginning --format '%k:%s\n' -b $B | sort)
if [ "$want" != "$got" ]; then
  echo "quickstart: the messages read back differ from those produced" >&2
  exit 1
fi
echo "quickstart: 10000 messages produced to $topic and consumed back, every key and value intact"
$K topic delete "$topic" --execute -b $B
