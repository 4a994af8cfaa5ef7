"""A local SparkSession set up the way this connector needs, for tests, benchmarks and trying
it out on one machine (on a cluster, the same three settings belong in spark-env.sh or the
submit command):

- PYSPARK_PYTHON: Spark starts its Python workers with the `python3` on PATH unless told, and
  that one may lack pyarrow or this package: the running interpreter is used instead;
- PYTHONPATH includes the repository, so the workers import broker.spark (the data source is
  pickled by reference: a worker that cannot import it fails with ModuleNotFoundError);
- SPARK_LOCAL_IP=127.0.0.1, as the host name may resolve to an address Spark should not bind.

They must be set before the JVM starts (the first getOrCreate of the process)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def prepare_environment() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *paths])


def local_session(app_name: str = "broker-spark", master: str = "local[2]", **conf: str):
    """getOrCreate() a session with the UI off, few shuffle partitions, a JVM that starts fast,
    UTC timestamps and format("rocketmq") registered; `conf` adds or overrides settings."""
    prepare_environment()
    from pyspark.sql import SparkSession

    from broker.spark import register
    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "spark.sql.session.timeZone": "UTC",
        **conf,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
