"""A Spark driver in a process of its own, connected to a standalone master, run by
tests/test_spark_cluster.py (why a process of its own: that module's docstring).

    python -m tests.helpers.spark_driver MASTER_URL LOCAL_DIR

It starts the application, waits until the master has given it its executors, then answers
commands: one JSON object per line on stdin, one answer per line on stdout, each answer line
starting with ANSWER (Spark may print to stdout too). An answer is {"ok": true, ...} or
{"ok": false, "error": traceback}. Closing stdin stops the session and ends the process.
SparkDriver (below) is the test's side.

Commands (every topic option goes through as .option(k, v)):
- {"cmd": "tasks", "n": N}: where N tasks ran: for each, the [pid, command line] of the Python
  worker that ran it and of each of its ancestors (read in the task, while they run).
- {"cmd": "read", "options": {...}}: a batch read; its partitions and rows.
- {"cmd": "stream", "options": {...}, "checkpoint": DIR}: one availableNow run into
  foreachBatch; the rows of every micro-batch with its batch id.
- {"cmd": "write", "options": {...}, "rows": [[body, tags, keys, {prop: value}], ...]}: a batch
  write of those rows.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from broker.spark.local import REPO, local_session
from tests.helpers.procs import Child

ANSWER = "@@answer "
ROW_COLUMNS = ("queueId", "queueOffset", "body", "tags", "keys", "topic", "brokerName")


def session(master: str, local_dir: str):
    # The executors run on the workers, not here: what they need travels as configuration.
    # spark.pyspark.python: the interpreter of their Python workers (this venv's: pyarrow,
    # this package); spark.executorEnv.PYTHONPATH: so those workers import broker.spark (the
    # data source is pickled by reference).
    return local_session("broker-spark-cluster-tests", master=master, **{
        "spark.pyspark.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": str(REPO),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "768m",
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "spark.local.dir": local_dir,
    })


def wait_for_executors(spark, n: int, timeout: float = 180) -> int:
    """Wait until n executors have registered (standalone starts them with the application,
    but asynchronously); the JVM's status tracker lists the driver too."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    delay = 0.05
    while (count := len(tracker.getExecutorInfos()) - 1) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} of {n} executors registered within {timeout}s")
        time.sleep(delay)  # nothing to wait on from Python: a bounded poll
        delay = min(delay * 2, 0.5)
    return count


def _reader(spark, options: dict, stream: bool):
    r = (spark.readStream if stream else spark.read).format("rocketmq")
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _rows(df) -> list[list]:
    return [[r.queueId, r.queueOffset, bytes(r.body).decode(), r.tags, r.keys, r.topic, r.brokerName]
            for r in df.select(*ROW_COLUMNS).collect()]


def _ancestry() -> list[list]:
    """[pid, command line] of this process and of each of its ancestors, up to init."""
    out, pid = [], os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        out.append([pid, cmd])
        pid = ppid
    return out


def tasks(spark, n: int) -> dict:
    # each task long enough that the scheduler hands the first wave to every free core
    rdd = spark.sparkContext.parallelize(range(n), n).map(lambda i: sum(range(300_000)) and i)
    return {"tasks": rdd.mapPartitions(lambda _: [_ancestry()]).collect()}


def read(spark, options: dict) -> dict:
    df = _reader(spark, options, stream=False)
    return {"partitions": df.rdd.getNumPartitions(), "rows": _rows(df)}


def stream(spark, options: dict, checkpoint: str) -> dict:
    batches: list[list] = []

    def sink(df, batch_id):
        batches.append([batch_id, _rows(df)])

    q = (_reader(spark, options, stream=True).writeStream.foreachBatch(sink)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination(180)
    if q.isActive:
        q.stop()
        raise TimeoutError("the availableNow query did not finish within 180 s")
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    return {"batches": batches}


def write(spark, options: dict, rows: list[list]) -> dict:
    df = spark.createDataFrame([tuple(r) for r in rows],
                               "body string, tags string, keys string, properties map<string,string>")
    w = df.repartition(4).write.format("rocketmq").mode("append")
    for k, v in options.items():
        w = w.option(k, str(v))
    w.save()
    return {"written": len(rows)}


class SparkDriver:
    """The test's side: starts this module as a child process (its own process group) and
    sends it commands; `call` returns the answer or fails with the driver's traceback."""

    def __init__(self, master: str, root: Path, ready_timeout: float = 240):
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.child = Child([sys.executable, "-m", "tests.helpers.spark_driver", master, str(root / "local")],
                           root / "driver.err", stdin=subprocess.PIPE)
        self.answered = 0
        try:
            self.ready = self._next(ready_timeout, "the driver's application to get its executors")
        except BaseException:
            self.close()
            raise

    def _next(self, timeout: float, what: str) -> dict:
        def nth(lines):
            answers = [line for line in lines if line.startswith(ANSWER)]
            return answers[self.answered] if len(answers) > self.answered else None
        out = json.loads(self.child.wait_lines(nth, timeout, what)[len(ANSWER):])
        self.answered += 1
        assert out["ok"], f"the Spark driver failed at {what}:\n{out['error']}"
        return out

    def call(self, cmd: str, timeout: float = 240, **args) -> dict:
        self.child.proc.stdin.write((json.dumps({"cmd": cmd, **args}) + "\n").encode())
        self.child.proc.stdin.flush()
        return self._next(timeout, f"{cmd} {args}"[:200])

    def close(self) -> None:
        """Closing stdin stops the session (the application ends, the workers stop its
        executors); then the driver's group (its JVM) is killed and waited for."""
        if self.child.proc.poll() is None:
            self.child.proc.stdin.close()
            try:
                self.child.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        self.child.kill_group()


def answer(obj: dict) -> None:
    sys.stdout.write(ANSWER + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(master: str, local_dir: str) -> int:
    spark = session(master, local_dir)
    try:
        executors = wait_for_executors(spark, 2)
        answer({"ok": True, "ready": True, "app": spark.sparkContext.applicationId, "executors": executors})
        for line in sys.stdin:
            if not line.strip():
                continue
            req = json.loads(line)
            try:
                cmd = req.pop("cmd")
                out = {"tasks": tasks, "read": read, "stream": stream, "write": write}[cmd](spark, **req)
                answer({"ok": True, **out})
            except Exception:
                answer({"ok": False, "error": traceback.format_exc()})
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
