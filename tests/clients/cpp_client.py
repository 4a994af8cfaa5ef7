"""Drives the real PyPI client `rocketmq` 0.4.4 (ctypes over the Apache C++ client's
librocketmq.so), unmodified, for tests/test_real_clients.py. Runs in its own venv
(.venv-rocketmq): the package is named `rocketmq`, as every other RocketMQ Python client is.

    python cpp_client.py produce '<json>'   one JSON line per send result (or error), then {"done": true}
    python cpp_client.py consume '<json>'   one JSON line per delivery until SIGTERM or stdin closes,
                                            then shutdown() (commits offsets) and {"closed": true}

Options as ons.js: nameSrv, group, topic, expression, instanceName, accessKey, secretKey,
messages [{tags, keys, props, body | size}], fail "always" | "once" (raise on a first delivery);
for consume also orderly (MessageListenerOrderly: the client locks its queues at the broker) and
messageModel "BROADCASTING" (offsets in $HOME/.rocketmq_offsets).
"""
import json
import signal
import sys
import threading

from rocketmq.client import Message, Producer, PushConsumer
from rocketmq.ffi import MessageModel

lock = threading.Lock()


def out(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def produce(opt):
    producer = Producer(opt["group"])
    producer.set_namesrv_addr(opt["nameSrv"])
    if opt.get("accessKey"):
        producer.set_session_credentials(opt["accessKey"], opt["secretKey"], "ALIYUN")
    producer.start()
    try:
        for m in opt["messages"]:
            msg = Message(opt["topic"])
            if m.get("tags"):
                msg.set_tags(m["tags"])
            if m.get("keys"):
                msg.set_keys(" ".join(m["keys"]))
            for k, v in (m.get("props") or {}).items():
                msg.set_property(k, v)
            msg.set_body(b"x" * m["size"] if m.get("size") else m["body"].encode())
            try:
                r = producer.send_sync(msg)
                out({"status": r.status.name, "msgId": r.msg_id, "queueOffset": r.offset})
            except Exception as e:  # the client's own exception types: the test reads the text
                out({"error": f"{type(e).__name__}: {e}"})
    finally:
        producer.shutdown()
    out({"done": True})


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


def consume(opt):
    consumer = PushConsumer(opt["group"], orderly=bool(opt.get("orderly")),
                            message_model=MessageModel[opt.get("messageModel") or "CLUSTERING"])
    consumer.set_namesrv_addr(opt["nameSrv"])
    consumer.set_instance_name(opt.get("instanceName") or f"cpp-{id(consumer)}")
    if opt.get("accessKey"):
        consumer.set_session_credentials(opt["accessKey"], opt["secretKey"], "ALIYUN")
    consumer.set_thread_count(1)
    prop_names = opt.get("propNames", [])

    def callback(msg):
        reconsume = msg.reconsume_times
        failing = opt.get("fail") == "always" or (opt.get("fail") == "once" and reconsume == 0)
        body = msg.body
        out({"topic": _text(msg.topic), "tags": _text(msg.tags) or None, "keys": _text(msg.keys) or None,
             "props": {k: _text(msg.get_property(k)) for k in prop_names},
             "body": None if len(body) > 256 else body.decode(), "size": len(body),
             "bodyIsX": body == b"x" * len(body) if len(body) > 256 else None,
             "reconsumeTimes": reconsume, "msgId": _text(msg.id), "queueId": msg.queue_id,
             "queueOffset": msg.queue_offset, "failing": failing})
        if failing:
            raise RuntimeError("failing on purpose: the test asks for a redelivery")

    consumer.subscribe(opt["topic"], callback, opt.get("expression") or "*")
    consumer.start()
    out({"ready": True})
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()
    consumer.shutdown()
    out({"closed": True})


if __name__ == "__main__":
    cmd, raw = sys.argv[1:3]
    (produce if cmd == "produce" else consume)(json.loads(raw))
