"""Drives the real PyPI client `rocketmq-python-client` 5.1.2 (gRPC, apache.rocketmq.v2), unmodified,
for tests/test_grpc_front.py. Runs in its own venv (.venv-rocketmq5): its package is named
`rocketmq`, as the 4.x one is.

    python py5_client.py produce '<json>'   one JSON line per send (receipt or error), then {"done": true}
    python py5_client.py receive '<json>'   SimpleConsumer: receive until `count` messages were acked (or
                                            `rounds` receives came back empty), one JSON line per message,
                                            then {"done": true}
    python py5_client.py push '<json>'      PushConsumer: one JSON line per delivery to its listener, until
                                            stdin closes; then shutdown and {"done": true}

Options: endpoints (the front's host:port), topic, mode "sync" | "async", messages [{tag, keys,
props, body, group (FIFO message group), delaySeconds, recall (recall_message with the receipt's
recall handle right after the send: a {"recalled": id} or {"recallError": text} line)}], transaction "commit" | "rollback" |
"unknown" (each message a half message of its own transaction, ended so; "unknown" leaves it to
the broker's check), checker "commit" | "rollback" (what the check-back answers), checks N (stay
until the checker answered N times, printing {"checked": message_id, "topic", "tag"} each time),
tls true (the client's own tls_enable: grpc.ssl_channel_credentials() with grpcio's default roots,
which GRPC_DEFAULT_SSL_ROOTS_FILE_PATH in the environment replaces).
"""
import json
import sys
import threading
import time

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message, MessageListener,
                      Producer, PushConsumer, SimpleConsumer, TransactionChecker, TransactionResolution)

lock = threading.Lock()
checked = threading.Semaphore(0)


def out(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


class Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer

    def check(self, message):
        out({"checked": message.message_id, "topic": message.topic, "tag": message.tag})
        checked.release()
        return TransactionResolution.COMMIT if self.answer == "commit" else TransactionResolution.ROLLBACK


def build(opt, m):
    msg = Message()
    msg.topic = opt["topic"]
    msg.body = m.get("body", "x").encode()
    if m.get("tag"):
        msg.tag = m["tag"]
    for key in m.get("keys") or ():  # the setter adds one key per assignment
        msg.keys = key
    for k, v in (m.get("props") or {}).items():
        msg.add_property(k, v)
    if m.get("group"):
        msg.message_group = m["group"]
    if m.get("delaySeconds"):
        # documented in ms, but 5.1.2 copies the value into the Timestamp's `seconds` field: seconds
        # is what reaches a server as the right time (deliverAtMs sends the documented ms)
        msg.delivery_timestamp = int(time.time()) + int(m["delaySeconds"])
    if m.get("deliverAtMs"):
        msg.delivery_timestamp = int(m["deliverAtMs"])
    return msg


def credentials(opt):
    """accessKey/secretKey options: the client signs every call with them (ACL on the front)."""
    return Credentials(opt.get("accessKey", ""), opt.get("secretKey", ""))


def receipt(r):
    return {"messageId": r.message_id, "transactionId": r.transaction_id, "offset": r.offset,
            "recallHandle": r.recall_handle}


def produce(opt):
    config = ClientConfiguration(opt["endpoints"], credentials(opt), request_timeout=10)
    checker = Checker(opt.get("checker", "commit")) if opt.get("transaction") or opt.get("checker") else None
    producer = Producer(config, (opt["topic"],), checker, tls_enable=opt.get("tls", False))
    producer.startup()
    try:
        futures = []
        for m in opt["messages"]:
            msg = build(opt, m)
            try:
                if opt.get("transaction"):
                    tx = producer.begin_transaction()
                    r = producer.send(msg, tx)
                    if opt["transaction"] == "commit":
                        tx.commit()
                    elif opt["transaction"] == "rollback":
                        tx.rollback()
                    out(receipt(r))
                elif opt.get("mode") == "async":
                    futures.append(producer.send_async(msg))
                else:
                    r = producer.send(msg)
                    out(receipt(r))
                    if m.get("recall"):  # take the timer message back at once (recall_message)
                        try:
                            out({"recalled": producer.recall_message(opt["topic"], r.recall_handle)})
                        except Exception as e:
                            out({"recallError": f"{type(e).__name__}: {e}"})
            except Exception as e:  # the client's own exception types: the test reads the text
                out({"error": f"{type(e).__name__}: {e}"})
        for f in futures:
            try:
                out(receipt(f.result(timeout=30)))
            except Exception as e:
                out({"error": f"{type(e).__name__}: {e}"})
        for _ in range(opt.get("checks", 0)):
            if not checked.acquire(timeout=60):
                out({"error": "no transaction check within 60 s"})
                break
        if opt.get("checks"):  # the checker's EndTransaction leaves on the client's thread: the test
            sys.stdin.read()   # closes stdin once a consumer saw its effect
    finally:
        producer.shutdown()
    out({"done": True})


def shown(m):
    return {"body": m.body.decode(), "tag": m.tag, "keys": sorted(m.keys or ()), "props": dict(m.properties),
            "messageId": m.message_id, "deliveryAttempt": m.delivery_attempt, "corrupted": m.corrupted}


def receive(opt):
    """Options: endpoints, topic, group, count, expression, invisibleSeconds, awaitSeconds, rounds,
    changeInvisible (change each message's invisible time once before acking it), ackLimit (ack only
    the first N messages received, print the others with "acked": false and leave them in flight)."""
    config = ClientConfiguration(opt["endpoints"], credentials(opt), request_timeout=10)
    consumer = SimpleConsumer(config, opt["group"], {opt["topic"]: FilterExpression(opt.get("expression", "*"))},
                              await_duration=opt.get("awaitSeconds", 2), tls_enable=opt.get("tls", False))
    consumer.startup()
    try:
        acked, empty = 0, 0
        while acked < opt["count"] and empty < opt.get("rounds", 10):
            try:
                msgs = consumer.receive(32, opt.get("invisibleSeconds", 15))
            except Exception as e:
                out({"error": f"{type(e).__name__}: {e}"})
                break
            empty = 0 if msgs else empty + 1
            for m in msgs:
                if "ackLimit" in opt and acked >= opt["ackLimit"]:
                    out(dict(shown(m), acked=False))
                    continue
                if opt.get("changeInvisible"):
                    consumer.change_invisible_duration(m, opt.get("invisibleSeconds", 15))
                consumer.ack(m)
                acked += 1
                out(dict(shown(m), acked=True))
            if "ackLimit" in opt and acked >= opt["ackLimit"] and not msgs:
                break
    finally:
        consumer.shutdown()
    out({"done": True})


class Listener(MessageListener):
    """fail: "always", or N (fail a message's deliveries up to attempt N, then succeed); failBodies:
    fail every delivery of the messages with these bodies (and only those); work: seconds the
    listener spends on each message before answering (a slow listener)."""

    def __init__(self, fail, fail_bodies=(), work=0):
        self.fail = fail
        self.fail_bodies = set(fail_bodies)
        self.work = work

    def consume(self, message):
        failing = self.fail == "always" or (isinstance(self.fail, int) and message.delivery_attempt <= self.fail) \
            or message.body.decode() in self.fail_bodies
        out(dict(shown(message), result="FAILURE" if failing else "SUCCESS"))
        time.sleep(self.work)  # the work itself, not a synchronization
        return ConsumeResult.FAILURE if failing else ConsumeResult.SUCCESS


def push(opt):
    """Options: endpoints, topic, group, expression, fail ("always" | N | absent), failBodies, work
    (seconds per message), threads."""
    config = ClientConfiguration(opt["endpoints"], credentials(opt), request_timeout=10)
    consumer = PushConsumer(config, opt["group"], Listener(opt.get("fail"), opt.get("failBodies", ()), opt.get("work", 0)),
                            {opt["topic"]: FilterExpression(opt.get("expression", "*"))},
                            consumption_thread_count=opt.get("threads", 4))
    consumer.startup()
    out({"ready": True})
    try:
        sys.stdin.read()  # the test closes stdin once it saw what it waited for
    finally:
        consumer.shutdown()
    out({"done": True})


if __name__ == "__main__":
    cmd, opt = sys.argv[1], json.loads(sys.argv[2])
    {"produce": produce, "receive": receive, "push": push}[cmd](opt)
