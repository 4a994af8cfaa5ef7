"""SendPipeline.append_values (the local gRPC front's sends handed over as values) appends what run()
appends for a SEND_MESSAGE_V2 frame of the same values, and declines what run() would hand back to
the processors or park (hypothesis): the kernel's entry, the kernel's frame path and the twin's entry
write the same records byte for byte (store timestamps blanked), the same queue offsets and counters."""
from __future__ import annotations

import json
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels.send_path import SendConn
from tests.twins import send_path_twin as T
from tools.fuzz.checks import (SEND_BASE, SEND_BORN_HOST, SEND_MAX_BODY, SEND_ROUTES, SEND_SEG, SEND_STORE_HOST,
                               _blank_store_ts, send_pipeline)

props_text = st.sampled_from(["", "TAGS\x01t", "TAGS\x01a\x02KEYS\x01k1 k2\x02WAIT\x01true\x02UNIQ_KEY\x01ABCD",
                              "KEYS\x01\u00e9\U0001f600\"\\/\x02WAIT\x01true", "a\x01b\x02DELAYx\x011", "DELAY\x013",
                              "TIMER_DELAY_SEC\x0110", "WAIT\x01false\x02KEYS\x01k", "CLUSTER\x01other\x02\x02x",
                              "a\x01" + "v" * 40000])
send = st.tuples(st.sampled_from([b"R1", b"R2", b"R1", b"U"]), st.sampled_from([0, 1, 0, 2, -1]),
                 st.binary(max_size=SEND_MAX_BODY) | st.binary(min_size=SEND_MAX_BODY + 1, max_size=SEND_MAX_BODY + 2),
                 props_text, st.integers(-2**31, 2**31 - 1), st.sampled_from([0, 0, 0, 1, 4, 8]),
                 st.integers(0, 2**41))


def _pipeline(seg: bytearray, cluster: bytes, parked: bool, enabled: bool):
    return send_pipeline(seg, cluster, parked, enabled)


def _frame(topic: bytes, qid: int, body: bytes, props: str, flag: int, sys_flag: int, born: int) -> bytes:
    header = json.dumps({"code": 310, "language": "JAVA", "version": 401, "opaque": 7, "flag": 0, "extFields": {
        "a": "pg", "b": topic.decode(), "c": "TBW102", "d": 4, "e": qid, "f": sys_flag, "g": born, "h": flag,
        "i": props, "j": 0, "k": False}}).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(send, max_size=10), st.sampled_from([b"", b"DefaultCluster"]), st.booleans(),
       st.sampled_from([True, True, False]))
def test_values_append_what_the_frame_appends(sends, cluster, parked, enabled):
    seg_v, seg_f, seg_t = bytearray(SEND_SEG), bytearray(SEND_SEG), bytearray(SEND_SEG)
    app_v, pipe_v = _pipeline(seg_v, cluster, parked, enabled)
    app_f, pipe_f = _pipeline(seg_f, cluster, parked, enabled)
    tapp = T.Appender(seg_t, SEND_BASE, SEND_BASE, SEND_STORE_HOST, SEND_MAX_BODY)
    twin = T.Pipeline(tapp, SEND_ROUTES, enabled, parked, cluster=cluster)
    cv, cf, ct = SendConn(SEND_BORN_HOST), SendConn(SEND_BORN_HOST), T.Conn(SEND_BORN_HOST)
    for topic, qid, body, props, flag, sys_flag, born in sends:
        raw = props.encode()
        got = pipe_v.append_values(cv, topic, qid, body, raw, flag, sys_flag, born)
        assert got == twin.append_values(ct, topic, qid, body, raw, flag, sys_flag, born)
        if parked:  # replies that would wait for durability: the values' entry declines every send
            assert got == -1
            continue
        frame = _frame(topic, qid, body, props, flag, sys_flag, born)
        status, _ = pipe_f.run(cf, frame, 0, len(frame))
        replies = cf.take_replies()
        if got < 0:  # declined: the frame is handed back to the processors
            assert status != 0 and replies is None
        else:
            assert status == 0 and replies is not None
            assert got == app_f.next_offset(topic, qid) - 1
    if parked:
        assert app_v.wrote == tapp.wrote == SEND_BASE
        return
    assert app_v.wrote == app_f.wrote == tapp.wrote
    assert _blank_store_ts(seg_v, tapp.records) == _blank_store_ts(seg_f, tapp.records) == bytes(seg_t)
    assert cv.take()[:2] == (len(tapp.records), sum(s for _, s in tapp.records))
