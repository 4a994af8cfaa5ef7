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
