#!/usr/bin/env bash
# The README's first command: install what is missing, then run the main job: a broker with its
# embedded, real ZooKeeper (started because none answers on localhost:2181), a topic, and a produce
# and consume round trip in which every key and value that went in must come out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh spark   # pyspark + pyarrow for `kafkactl spark-load` (Java comes with the system packages)
K=.venv/bin/kafkactl
$K --version
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { .venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
BP=9092   # the broker's port, unless something else holds it
if taken $BP; then BP=$(free_port); echo "quickstart: 127.0.0.1:9092 is taken; the broker listens on $BP instead"; fi
ZP=2181   # a ZooKeeper already there is used; anything else there: a private one on a free port
if taken $ZP && ! $K zookeeper status --port $ZP >/dev/null 2>&1; then
  ZP=$(free_port); echo "quickstart: 127.0.0.1:2181 is taken by something that is not ZooKeeper; using $ZP"
fi
B=127.0.0.1:$BP
$K broker start --daemon --port $BP -z 127.0.0.1:$ZP   # broker 0, data in ~/.local/share/kafkactl
trap '$K broker stop' EXIT                    # a clean shutdown; a private ZooKeeper no other broker uses stops too
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
