#!/bin/sh
# `make spark-example`: the Spark example of docs/spark.md end to end against a running name server and
# broker ($NAMESRV, default 127.0.0.1:9876, the one `make run` serves). The orders go to a topic
# of this run's own, so a second run counts exactly what it produced (3000 TagA, 1000 TagB).
set -eu
cd "$(dirname "$0")/.."
NAMESRV=${NAMESRV:-127.0.0.1:9876}
BIN=${VENV:-.venv}/bin
run=$(date +%Y%m%d%H%M%S)_$$
orders=Orders_$run
counts=OrderCounts_$run

# `broker admin status` asks the name server for its brokers and then each broker itself
if ! why=$("$BIN/broker" admin status --namesrv "$NAMESRV" 2>&1 >/dev/null); then
  echo "spark-example: no broker reachable through the name server $NAMESRV ($why)." >&2
  echo "Start \`make run\` first (in another terminal), or set NAMESRV=host:port to a running name server." >&2
  exit 1
fi

seq 1 3000 | "$BIN/broker" produce --namesrv "$NAMESRV" --topic "$orders" --tags TagA >/dev/null
seq 1 1000 | "$BIN/broker" produce --namesrv "$NAMESRV" --topic "$orders" --tags TagB >/dev/null
echo "produced 3000 TagA and 1000 TagB orders to $orders"

NAMESRV_ADDR=$NAMESRV "$BIN/python" examples/count_by_tag.py "$orders" "$counts"

echo "the counts, read back from $counts:"
"$BIN/broker" consume --namesrv "$NAMESRV" --topic "$counts" --group "check_$run" --from-first --count 2 --timeout 120
