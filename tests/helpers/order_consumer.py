"""The project's own push consumer in a process of its own, driven as tests/clients/cpp_client.py
drives the C++ one (tests.helpers.real_clients kind "py"), for tests/test_orderly_consumption.py
and tests/test_broadcast_consumption.py, which kill it with SIGKILL or close it through stdin.

    python -m tests.helpers.order_consumer consume OPTIONS_JSON

Prints {"ready": true, "clientId", "consumerData"} once started, one JSON line per delivery
({"topic", "body", "queueId", "queueOffset", "reconsumeTimes", "ok"}) and {"closed": true} after
shutdown when stdin closes. With `log`, each delivery is also appended there as one line
"<instanceName> <queueId> <body> <reconsumeTimes> ok|fail" (O_APPEND, one write per line: the
consumers of a test share the file, and its line order is the order their deliveries happened
in). Both are written before the listener answers, so a delivery whose offset was never
committed shows up again after a kill.

Options: nameSrv, group, topic, expression, instanceName, orderly, messageModel, offsetDir, log,
fail ({"<body>": n}: that message fails while its reconsume_times < n; n < 0: always), workMs
(the listener holds each message that long after logging it, awaiting), and PushConsumer
keywords in `kw` (lock_interval, lock_max_live_time, persist_interval, ...).
"""
from __future__ import annotations

import asyncio
import json
import os
import sys

from broker.client.push_consumer import PushConsumer


def say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def consume(opt: dict) -> None:
    fd = os.open(opt["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if opt.get("log") else None
    fail = {k: int(v) for k, v in (opt.get("fail") or {}).items()}
    name = opt["instanceName"]
    pc = PushConsumer(opt["group"], opt["nameSrv"], consume_from_first=True, orderly=bool(opt.get("orderly")),
                      message_model=opt.get("messageModel") or "CLUSTERING", instance_name=name,
                      local_offset_store_dir=opt.get("offsetDir"), **(opt.get("kw") or {}))
    pc.subscribe(opt["topic"], opt.get("expression") or "*")

    work = opt.get("workMs", 0) / 1000

    async def listener(msgs):
        [m] = msgs
        body = m.body.decode()
        times = fail.get(body, 0)
        ok = not (times < 0 or m.reconsume_times < times)
        if fd is not None:
            os.write(fd, f"{name} {m.queue_id} {body} {m.reconsume_times} {'ok' if ok else 'fail'}\n".encode())
        say({"topic": m.topic, "body": body, "queueId": m.queue_id, "queueOffset": m.queue_offset,
             "reconsumeTimes": m.reconsume_times, "ok": ok, "tags": m.tags, "keys": m.keys, "props": m.properties,
             "msgId": m.uniq_key or m.msg_id})
        if work:  # the message is in hand for a while: a rebalance must wait for it, not cut it off
            await asyncio.sleep(work)
        return ok

    pc.register(listener)
    await pc.start()
    say({"ready": True, "clientId": pc.client.client_id, "consumerData": pc.consumer_data()})
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the test closes stdin
    await pc.shutdown()
    say({"closed": True})


if __name__ == "__main__":
    cmd, raw = sys.argv[1:3]
    assert cmd == "consume", f"unknown command {cmd!r}"
    asyncio.run(consume(json.loads(raw)))
