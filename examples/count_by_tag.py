# examples/count_by_tag.py — run: .venv/bin/python examples/count_by_tag.py [ORDERS_TOPIC COUNTS_TOPIC]
import os
import sys

from pyspark.sql import functions as F

from broker.spark.local import local_session   # a local[2] session with format("rocketmq") registered

namesrv = os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")
orders_topic, counts_topic = sys.argv[1:3] if len(sys.argv) > 2 else ("Orders", "OrderCounts")

spark = local_session("count-by-tag")
# on a cluster instead: from broker.spark import register; register(spark)
orders = (spark.read.format("rocketmq")
          .option("namesrvAddr", namesrv).option("topic", orders_topic).load())
counts = orders.groupBy("tags").count().orderBy("tags")
counts.show()            # TagA 3000, TagB 1000
(counts.select(F.to_json(F.struct("tags", "count")).alias("body"), "tags")
       .write.format("rocketmq").option("namesrvAddr", namesrv)
       .option("topic", counts_topic).mode("append").save())
spark.stop()
