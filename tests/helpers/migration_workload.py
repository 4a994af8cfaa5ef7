"""One workload of every kind of record a RocketMQ store holds, written through raw remoting
requests to any broker (Apache RocketMQ's own or ours), and the answers a broker gives about it
afterwards, so a test can start the other broker on the same store and compare answer for answer.

Records written (topics made with UPDATE_AND_CREATE_TOPIC first):
- plain messages with KEYS and TAGS over <p>A's 4 queues and <p>B's 2 queues
- a SEND_BATCH_MESSAGE of 3 into <p>B queue 1
- delayed: level 1 (delivered while the writer runs, checked) and level 17 (1 h: still scheduled)
- transactional: one committed, one rolled back, one left half (checked back by the next broker)
- a retry (CONSUMER_SEND_MSG_BACK, delay level 1, delivered to %RETRY%<p>-cg) and a DLQ message
  (sent with reconsumeTimes 16, sent back with maxReconsumeTimes 16 -> %DLQ%<p>-cg)
- committed consumer offsets of the group on the A and B topics
Each round of the workload has its own prefix (topics `<p>A`, `<p>B`, `<p>Tx`, group `<p>-cg`), so
one store can take a round from each broker in turn.
"""
from __future__ import annotations

import re
import time

import msgspec

from broker.remoting import codes
from broker.store.message import decode_message
from tests.helpers.procs import wait_until
from tests.helpers.raw_wire import RawConn, frame, header

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
LEVELS = "messageDelayLevel=1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h\n"
# the keys both brokers get, whichever writes: the default delay levels (level 1 = 1 s, level 17 =
# 1 h), transactions checked back every second once a second old (and not given up while the
# test runs), offsets persisted every second; on a loaded machine a request may wait in the Java
# broker's send queue longer than its 200 ms before it answers SYSTEM_BUSY
CONF = (LEVELS + "transactionCheckInterval=1000\ntransactionTimeOut=1000\ntransactionCheckMax=1000\n"
        "flushConsumerOffsetInterval=1000\nflushDelayOffsetInterval=1000\nwaitTimeMillsInSendQueue=10000\n")
SEND_OK = 0
TX_PREPARED, TX_COMMIT, TX_ROLLBACK = 4, 8, 12


def fastjson_decode(raw: bytes):
    """JSON as fastjson writes a Map<Integer, Long>: unquoted integer keys ({1:1000,2:0})."""
    return msgspec.json.decode(re.sub(rb'([{,]\s*)(-?\d+)(\s*):', rb'\1"\2"\3:', raw))


def props(**kv: str) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in kv.items())


def send(conn: RawConn, topic: str, queue_id: int, body: bytes, properties: str, sys_flag: int = 0,
         reconsume: int = 0, group: str = "mig-pg", code: int = codes.SEND_MESSAGE_V2, batch: bool = False):
    ext = {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": str(sys_flag),
           "g": str(int(time.time() * 1000)), "h": "0", "i": properties, "j": str(reconsume), "k": "false",
           "m": "true" if batch else "false"}
    r = conn.request(code, ext, body)
    assert r.code == SEND_OK, (topic, r.code, r.remark)
    return r


def encode_batch(items: list[tuple[bytes, str]]) -> bytes:
    """MessageDecoder.encodeMessages: totalSize, magic, bodyCRC, flag, bodyLen, body, propsLen, props."""
    out = bytearray()
    for body, p in items:
        pb = p.encode()
        total = 4 * 5 + len(body) + 2 + len(pb)
        out += total.to_bytes(4, "big") + bytes(12) + len(body).to_bytes(4, "big") + body
        out += len(pb).to_bytes(2, "big") + pb
    return bytes(out)


def phys_of(msg_id: str) -> int:
    """The commit-log offset in an offset message id (store host 8 bytes, then the offset)."""
    return int(msg_id[-16:], 16)


def max_offset(port: int, topic: str, queue_id: int) -> int:
    conn = RawConn(port)
    try:
        r = conn.request(codes.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
        return int(r.ext["offset"]) if r.code == codes.SUCCESS else -1
    finally:
        conn.close()


class Round:
    """One round of the workload, written by one broker."""

    def __init__(self, prefix: str, seed: int):
        self.p, self.seed = prefix, seed
        self.topics = {f"{prefix}A": 4, f"{prefix}B": 2, f"{prefix}Tx": 1}
        self.a, self.b, self.tx = list(self.topics)
        self.group, self.tx_group = f"{prefix}-cg", f"{prefix}-txpg"
        self.retry, self.dlq = f"%RETRY%{self.group}", f"%DLQ%{self.group}"
        self.queues = [(t, q) for t, n in (*self.topics.items(), (self.retry, 1), (self.dlq, 1)) for q in range(n)]
        self.keys = [(self.a, f"{prefix}-shared"), (self.b, f"{prefix}-batch-1"), (self.b, f"{prefix}-{self.b}-3"),
                     (SCHEDULE, f"{prefix}-delay-1h"), (self.tx, f"{prefix}-tx-commit"),
                     (self.tx, f"{prefix}-tx-rollback"), (self.tx, f"{prefix}-tx-pending"), (self.dlq, f"{prefix}-dlq")]
        self.offsets = [(t, q) for t, n in list(self.topics.items())[:2] for q in range(n)]

    def uniq(self, i: int) -> str:
        """A UNIQ_KEY (the client's message id) of our own making: 32 hex digits, unique per record."""
        return f"7F00000100002A9F{self.seed:04X}{i:012X}"

    def create(self, conn: RawConn) -> None:
        for topic, queues in self.topics.items():
            r = conn.request(codes.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
                "order": "false"})
            assert r.code == codes.SUCCESS, (topic, r.code, r.remark)
        r = conn.request(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, msgspec.json.encode({
            "groupName": self.group, "consumeEnable": True, "consumeFromMinEnable": True,
            "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True}))
        assert r.code == codes.SUCCESS, (r.code, r.remark)

    def write(self, port: int) -> None:
        """Every kind of record, then waits until the writer has delivered the 1 s delayed message
        and the retry (both at level 1)."""
        p = self.p
        conn = RawConn(port)
        try:
            self.create(conn)
            n = 0
            for topic, queues in ((self.a, 4), (self.b, 2)):
                for i in range(6):
                    n += 1
                    send(conn, topic, i % queues, f"{topic}-plain-{i}".encode(),
                         props(KEYS=f"{p}-{topic}-{i} {p}-shared", TAGS=f"tag{i % 2}", UNIQ_KEY=self.uniq(n)))
            batch = [(f"{self.b}-batch-{i}".encode(),
                      props(KEYS=f"{p}-batch-{i}", TAGS="batch", UNIQ_KEY=self.uniq(100 + i))) for i in range(3)]
            send(conn, self.b, 1, encode_batch(batch), "", code=codes.SEND_BATCH_MESSAGE, batch=True)
            send(conn, self.a, 0, f"{self.a}-delay-1s".encode(),
                 props(KEYS=f"{p}-delay-1s", DELAY="1", UNIQ_KEY=self.uniq(200)))
            send(conn, self.a, 1, f"{self.a}-delay-1h".encode(),
                 props(KEYS=f"{p}-delay-1h", DELAY="17", UNIQ_KEY=self.uniq(201)))
            halves = {}
            for i, what in enumerate(("commit", "rollback", "pending")):
                r = send(conn, self.tx, 0, f"{self.tx}-{what}".encode(),
                         props(KEYS=f"{p}-tx-{what}", TRAN_MSG="true", PGROUP=self.tx_group,
                               UNIQ_KEY=self.uniq(300 + i)), sys_flag=TX_PREPARED, group=self.tx_group)
                halves[what] = (r.ext["msgId"], int(r.ext["queueOffset"]), self.uniq(300 + i))
            for what, action in (("commit", TX_COMMIT), ("rollback", TX_ROLLBACK)):
                msg_id, qoff, uniq = halves[what]
                r = conn.request(codes.END_TRANSACTION, {
                    "producerGroup": self.tx_group, "tranStateTableOffset": str(qoff),
                    "commitLogOffset": str(phys_of(msg_id)), "commitOrRollback": str(action),
                    "fromTransactionCheck": "false", "msgId": uniq, "transactionId": uniq})
                assert r.code == codes.SUCCESS, (what, r.code, r.remark)
            r = send(conn, self.a, 2, f"{self.a}-to-retry".encode(), props(KEYS=f"{p}-retry", UNIQ_KEY=self.uniq(400)))
            back = conn.request(codes.CONSUMER_SEND_MSG_BACK, {
                "offset": str(phys_of(r.ext["msgId"])), "group": self.group, "delayLevel": "1",
                "originMsgId": self.uniq(400), "originTopic": self.a, "unitMode": "false", "maxReconsumeTimes": "16"})
            assert back.code == codes.SUCCESS, (back.code, back.remark)
            r = send(conn, self.a, 3, f"{self.a}-to-dlq".encode(), props(KEYS=f"{p}-dlq", UNIQ_KEY=self.uniq(401)),
                     reconsume=16)
            back = conn.request(codes.CONSUMER_SEND_MSG_BACK, {
                "offset": str(phys_of(r.ext["msgId"])), "group": self.group, "delayLevel": "0",
                "originMsgId": self.uniq(401), "originTopic": self.a, "unitMode": "false", "maxReconsumeTimes": "16"})
            assert back.code == codes.SUCCESS, (back.code, back.remark)
            for topic, q in self.offsets:
                r = conn.request(codes.UPDATE_CONSUMER_OFFSET, {"consumerGroup": self.group, "topic": topic,
                                                                "queueId": str(q), "commitOffset": str(q + 1)})
                assert r.code == codes.SUCCESS, (r.code, r.remark)
        finally:
            conn.close()
        wait_until(lambda: max_offset(port, self.a, 0) >= 3 and max_offset(port, self.retry, 0) >= 1, 30,
                   "the 1 s delayed message and the retry to be delivered")

    def resolve_pending(self, port: int, timeout: float = 30) -> dict:
        """As the transaction's producer: a heartbeat, then the broker's CHECK_TRANSACTION_STATE about
        the pending half, answered COMMIT (oneway, as the client does). Returns the check's fields."""
        conn = RawConn(port, timeout=timeout)
        try:
            r = conn.request(codes.HEART_BEAT, {}, msgspec.json.encode({
                "clientID": f"127.0.0.1@{self.p}-tx", "producerDataSet": [{"groupName": self.tx_group}],
                "consumerDataSet": []}))
            assert r.code == codes.SUCCESS, (r.code, r.remark)
            deadline = time.monotonic() + timeout
            while True:
                assert time.monotonic() < deadline, "no CHECK_TRANSACTION_STATE about the pending half"
                check = conn.notifications.pop(0) if conn.notifications else conn.read()
                if check.code != codes.CHECK_TRANSACTION_STATE:
                    continue
                m = decode_message(bytes(check.body))
                if m.properties.get("UNIQ_KEY") == self.uniq(302):
                    break
            conn.send(frame(header(codes.END_TRANSACTION, {
                "producerGroup": self.tx_group, "tranStateTableOffset": check.ext["tranStateTableOffset"],
                "commitLogOffset": check.ext["commitLogOffset"], "commitOrRollback": str(TX_COMMIT),
                "fromTransactionCheck": "true", "msgId": check.ext.get("msgId", self.uniq(302)),
                "transactionId": check.ext.get("transactionId", self.uniq(302))}, flag=2)))
            wait_until(lambda: max_offset(port, self.tx, 0) >= 2, timeout, "the checked-back half to be committed")
            return {"topic": m.topic, "body": m.body, "uniq": m.properties.get("UNIQ_KEY"),
                    "realTopic": m.properties.get("REAL_TOPIC")}
        finally:
            conn.close()


def record(m) -> dict:
    """A stored record, field by field (the commit-log offset included: the store is the same)."""
    return {"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "commitLogOffset": m.physical_offset, "body": m.body, "properties": m.properties, "flag": m.flag, "sysFlag": m.sys_flag,
            "bornTimestamp": m.born_timestamp, "bornHost": m.born_host, "storeTimestamp": m.store_timestamp,
            "storeHost": m.store_host, "reconsumeTimes": m.reconsume_times, "bodyCRC": m.body_crc, "size": m.size}


def records(body: bytes) -> list[dict]:
    out, pos = [], 0
    while pos < len(body):
        m = decode_message(body, pos)
        out.append(record(m))
        pos += m.size
    return out


def pull_all(conn: RawConn, topic: str, queue_id: int) -> dict:
    """PULL_MESSAGE from offset 0 until no more: the records and the last answer's code and offsets."""
    got, offset = [], 0
    while True:
        r = conn.request(codes.PULL_MESSAGE, {
            "consumerGroup": "mig-inspector", "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
            "subscription": "*", "subVersion": "0", "expressionType": "TAG"})
        if r.code != codes.SUCCESS:
            return {"code": r.code, "minOffset": int(r.ext.get("minOffset", -1)),
                    "maxOffset": int(r.ext.get("maxOffset", -1)), "records": got}
        got += records(bytes(r.body))
        offset = int(r.ext["nextBeginOffset"])


def observe(port: int, rounds: list[Round]) -> dict:
    """What the broker answers about the rounds' records: every queue pulled, the consumer offsets,
    the schedule queues and delay offsets, index queries by key and VIEW_MESSAGE_BY_ID."""
    conn = RawConn(port)
    try:
        out: dict = {"queues": {}, "consumerOffsets": {}, "query": {}, "view": {}}
        for rd in rounds:
            for topic, q in rd.queues:
                out["queues"][f"{topic}/{q}"] = pull_all(conn, topic, q)
            for topic, q in rd.offsets:
                r = conn.request(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": rd.group, "topic": topic,
                                                               "queueId": str(q)})
                out["consumerOffsets"][f"{rd.group}@{topic}/{q}"] = (r.code, r.ext.get("offset"))
            now = int(time.time() * 1000)
            for topic, key in rd.keys:
                r = conn.request(codes.QUERY_MESSAGE, {"topic": topic, "key": key, "maxNum": "32",
                                                       "beginTimestamp": "0", "endTimestamp": str(now + 3_600_000)})
                out["query"][f"{topic}#{key}"] = (r.code, sorted((m["commitLogOffset"], m["body"])
                                                               for m in records(bytes(r.body or b""))))
        out["schedule"] = {q: max_offset(port, SCHEDULE, q) for q in (0, 16)}
        r = conn.request(codes.GET_ALL_DELAY_OFFSET, {})
        out["delayOffsets"] = (r.code, {int(k): v for k, v in fastjson_decode(bytes(r.body))["offsetTable"].items()})
        for name, q in out["queues"].items():
            for m in q["records"]:
                r = conn.request(codes.VIEW_MESSAGE_BY_ID, {"offset": str(m["commitLogOffset"])})
                out["view"][(name, m["queueOffset"])] = (r.code, records(bytes(r.body or b"")))
        return out
    finally:
        conn.close()
