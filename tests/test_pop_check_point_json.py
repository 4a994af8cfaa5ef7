"""The revive log's records (PopCheckPoint, AckMsg, BatchAckMsg) as RocketMQ writes them: compact
JSON with fastjson's short names in its field order, read back whole by from_json; a broker name
outside ASCII goes as UTF-8 (fastjson's way), which json.loads and fastjson both read."""
import json

from broker.store.pop_check_point import AckMsg, BatchAckMsg, PopCheckPoint


def test_checkpoint_json_is_compact_in_rocketmqs_order_and_reads_back():
    ck = PopCheckPoint(100, 1_700_000_000_000, 30_000, 3, 2, "T", "G", "broker-a", [0, 1, 5])
    body = ck.to_json()
    assert body == (b'{"so":100,"pt":1700000000000,"it":30000,"bm":0,"n":3,"q":2,"t":"T","c":"G","ro":0,'
                    b'"d":[0,1,5],"bn":"broker-a"}')
    assert PopCheckPoint.from_json(body) == ck
    ck.attempt_id = "a1"
    assert json.loads(ck.to_json())["aid"] == "a1" and PopCheckPoint.from_json(ck.to_json()) == ck


def test_acks_json_read_back_and_non_ascii_names_are_utf8():
    ack = AckMsg(105, 100, "G", "T", 2, 1_700_000_000_000, "broker-ä")
    body = ack.to_json()
    assert body == '{"ao":105,"so":100,"c":"G","t":"T","q":2,"pt":1700000000000,"bn":"broker-ä"}'.encode()
    assert AckMsg.from_json(body) == ack
    batch = BatchAckMsg([101, 105], 100, "G", "T", 2, 1_700_000_000_000, "broker-ä")
    assert batch.to_json() == '{"aol":[101,105],"so":100,"c":"G","t":"T","q":2,"pt":1700000000000,"bn":"broker-ä"}'.encode()
    assert BatchAckMsg.from_json(batch.to_json()) == batch


class _RecordingStore:
    """What ReviveLog.append hands the store: each record's queue, body and properties."""

    def __init__(self):
        from broker.store.config_files import ConsumerOffsetTable
        self.records: list[tuple] = []
        self.consumer_offsets = ConsumerOffsetTable("/nonexistent")

    def append(self, topic, queue_id, body, properties, lazy_dispatch=False):
        from broker.store.message import encode_properties
        from broker.store.results import PutResult, PutStatus
        props = properties if type(properties) is bytes else encode_properties(properties)  # as MessageStore.append
        self.records.append((topic, queue_id, bytes(body), props))
        return PutResult(PutStatus.PUT_OK, 0, len(self.records) - 1, 0, 0, b""), None

    def append_record(self, topic, queue_id, body, properties):  # (MessageStore.append_record: the revive log's)
        r, fut = self.append(topic, queue_id, body, properties, lazy_dispatch=True)
        return r.queue_offset, fut

    def max_offset(self, topic, queue_id):
        return len(self.records)


def test_checkpoint_and_batch_ack_records_as_rocketmq_writes_them():
    """The ck and bAck records' properties: TAGS and UNIQ_KEY (genCkUniqueId, genBatchAckUniqueId:
    the fields joined by @, the offsets as Java's List.toString), as encode_properties writes them."""
    from broker.server.pop.pop_revive_service import PopReviveService
    from broker.server.pop.revive_log import ReviveLog
    from broker.store.message import encode_properties
    store = _RecordingStore()
    log = ReviveLog(store, "DefaultCluster", 8)
    svc = PopReviveService(store, None, log, None, "broker-a", 16)
    ck = PopCheckPoint(100, 1_700_000_000_000, 30_000, 3, 2, "T", "G", diffs=[0, 1, 5])
    assert svc.add_check_point(ck, 3) is None
    svc.ack_many(svc.checkpoint("G", "T", 2, 100, 1_700_000_000_000, 3), [2, 0])
    svc.ack_many(ck, [1])  # the last one alone: an "ack" record, and the checkpoint is done
    assert [(t, q) for t, q, _, _ in store.records] == [("rmq_sys_REVIVE_LOG_DefaultCluster", 3)] * 3
    assert [r[3] for r in store.records] == [
        encode_properties({"TAGS": "ck", "UNIQ_KEY": "T@2@100@G@1700000000000@broker-a@ck"}),
        encode_properties({"TAGS": "bAck", "UNIQ_KEY": "T@2@[100, 105]@G@1700000000000@broker-a@bAck"}),
        encode_properties({"TAGS": "ack", "UNIQ_KEY": "T@2@101@G@1700000000000@broker-a@ack"})]
    assert store.records[0][2] == (b'{"so":100,"pt":1700000000000,"it":30000,"bm":0,"n":3,"q":2,"t":"T","c":"G",'
                                   b'"ro":0,"d":[0,1,5],"bn":"broker-a"}')
    assert store.records[1][2] == b'{"aol":[100,105],"so":100,"c":"G","t":"T","q":2,"pt":1700000000000,"bn":"broker-a"}'
    assert not svc.inflight and store.consumer_offsets.query("CID_RMQ_SYS_REVIVE_GROUP",
                                                             "rmq_sys_REVIVE_LOG_DefaultCluster", 3) == 3
