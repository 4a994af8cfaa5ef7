"""Headers as the real clients send them (npm ali-ons 3.12.0, the Apache C++ client through PyPI
rocketmq 0.4.4), decoded by the header kernel and its twin, and the kernel's encoded responses read
back by those clients.

The stored samples were captured with the recorder below; the live tests run each client's producer
against it again (a name server and broker in one: it answers the route lookup with itself, and
every other request with SUCCESS, every answer rendered by broker.kernels.header.encode_header)."""
from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess

import pytest

from broker.kernels import header as K
from tests.helpers.real_clients import CLIENTS, CPP_PYTHON, check_installed
from tests.twins import header_twin as T

# -- captured once (2026-11, tools: this file's recorder) -----------------------------------------
ONS_ROUTE = b'{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,"extFields":{"topic":"TopicTest"}}'
ONS_SEND_V2 = (b'{"code":310,"language":"JAVA","opaque":2,"flag":0,"version":121,"extFields":{"a":"pg","b":"TopicTest",'
               b'"c":"TBW102","d":4,"e":0,"f":0,"g":1795582575548,"h":0,"i":"TAGS\\u0001TagA\\u0002KEYS\\u0001order-1'
               b'\\u0002p\\u0001v\\u0002","j":0,"k":false}}')
ONS_UNREGISTER = (b'{"code":35,"language":"JAVA","opaque":3,"flag":0,"version":121,"extFields":{"clientID":'
                  b'"192.0.2.2@ons-24829","producerGroup":"pg"}}')
CPP_ROUTE = (b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"N/YT7X6tJe5UfutmW+uNwTTJ7Fc=",'
             b'"topic":"TopicTest"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n')
CPP_SEND = (b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"PQv4vn7iu/vRAR6VuuJLKJCXFQo=",'
            b'"batch":"0","bornTimestamp":"1795582578098","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,'
            b'"producerGroup":"pg","properties":"KEYS\\u0001order-1\\u0002TAGS\\u0001TagA\\u0002UNIQ_KEY\\u0001'
            b'0100007F0000A3BC0000323005820100\\u0002WAIT\\u0001true\\u0002p\\u0001v\\u0002","queueId":0,'
            b'"reconsumeTimes":"0","sysFlag":0,"topic":"TopicTest","unitMode":"0"},"flag":0,"language":"CPP",'
            b'"opaque":1,"remark":"","version":63}\n')
SAMPLES = [ONS_ROUTE, ONS_SEND_V2, ONS_UNREGISTER, CPP_ROUTE, CPP_SEND]


def decode_all(raw: bytes) -> tuple:
    """Kernel and twin agree, and agree with json.loads (a third reading)."""
    got = K.decode_header(0, raw, 0, len(raw))
    assert T.decode_header(0, raw, 0, len(raw)) == got
    assert K.parse_fields(0, raw, 0, len(raw)) == T.parse_fields(0, raw, 0, len(raw))
    j = json.loads(raw)
    assert got == (j["code"], j.get("language") or "", j.get("version", 0), j.get("opaque", 0), j.get("flag", 0),
                   j.get("remark"), j.get("extFields") or {})
    return got


def test_ali_ons_send_message_v2():
    code, lang, version, opaque, flag, remark, ext = decode_all(ONS_SEND_V2)
    assert (code, lang, version, opaque, flag, remark) == (310, "JAVA", 121, 2, 0, None)
    # ali-ons writes raw JS values: numbers and false, and \u-escaped property separators
    assert ext == {"a": "pg", "b": "TopicTest", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1795582575548, "h": 0,
                   "i": "TAGS\x01TagA\x02KEYS\x01order-1\x02p\x01v\x02", "j": 0, "k": False}
    fields = K.parse_fields(0, ONS_SEND_V2, 0, len(ONS_SEND_V2))
    assert fields[4] == 0  # JAVA
    kinds = {ONS_SEND_V2[f[0]:f[0] + f[1]].decode(): f[6] for f in fields[9]}
    assert kinds["a"] == K.V_STRING and kinds["i"] == K.V_ESCAPED and kinds["g"] == K.V_INT and kinds["k"] == K.V_FALSE


def test_cpp_send_message():
    code, lang, version, opaque, flag, remark, ext = decode_all(CPP_SEND)
    # keys sorted, remark "", a newline after the object, ints for some keys and strings for others
    assert (code, lang, version, opaque, flag, remark) == (10, "CPP", 63, 1, 0, "")
    assert ext["queueId"] == 0 and ext["sysFlag"] == 0 and ext["bornTimestamp"] == "1795582578098"
    assert ext["AccessKey"] == "" and ext["properties"].startswith("KEYS\x01order-1\x02TAGS\x01TagA\x02")
    assert K.parse_fields(0, CPP_SEND, 0, len(CPP_SEND))[4] == 1  # CPP


@pytest.mark.parametrize("raw", SAMPLES, ids=["ons-route", "ons-send-v2", "ons-unregister", "cpp-route", "cpp-send"])
def test_samples_decode_and_survive_a_re_encode(raw):
    code, lang, version, opaque, flag, remark, ext = decode_all(raw)
    as_java = {k: v if isinstance(v, str) else json.dumps(v) for k, v in ext.items()}  # HashMap<String,String>
    for stype in (0, 1):
        again = K.encode_header(stype, code, lang, version, opaque, flag, remark, as_java)
        assert again == T.encode_header(stype, code, lang, version, opaque, flag, remark, as_java)
        back = K.decode_header(stype, again, 0, len(again))
        if stype == 0:
            assert back == (code, lang, version, opaque, flag, remark, as_java)
        else:  # ROCKETMQ: "" travels as length 0, which Java reads as null
            assert back == (code, lang, version, opaque, flag, remark or None, {k: v or None for k, v in as_java.items()})


# -- live: the clients against a recorder whose answers the kernel renders ------------------------

# ignored by the clients on success, but their JSON readers must get through it
AWKWARD = 'quote " backslash \\ slash / newline \n tab \t nul \x00 del \x7f é 中 😀 \u2028'


def _answer(stype: int, code: int, opaque: int, ext: dict | None = None, body: bytes = b"") -> bytes:
    header = K.encode_header(stype, code, "JAVA", 395, opaque, 1, AWKWARD, dict(ext or {}, awkward=AWKWARD))
    return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


async def _record(argv: list[str], home: str) -> list[tuple[int, bytes]]:
    frames: list[tuple[int, bytes]] = []
    port = []

    async def serve(reader, writer):
        try:
            while True:
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                data = await reader.readexactly(length)
                (word,) = struct.unpack_from(">I", data, 0)
                stype, header = word >> 24, data[4:4 + (word & 0xFFFFFF)]
                frames.append((stype, header))
                code, _, _, opaque, flag, _, ext = K.decode_header(stype, header, 0, len(header))
                if flag & 2:
                    continue  # oneway
                if code == 105:  # GET_ROUTEINFO_BY_TOPIC: this server is the topic's only broker
                    route = {"orderTopicConf": None, "filterServerTable": {},
                             "queueDatas": [{"brokerName": "b", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
                                             "topicSysFlag": 0, "topicSynFlag": 0}],
                             "brokerDatas": [{"cluster": "c", "brokerName": "b",
                                              "brokerAddrs": {"0": f"127.0.0.1:{port[0]}"}}]}
                    writer.write(_answer(0, 0, opaque, None, json.dumps(route).encode()))
                elif code in (10, 310):  # SEND_MESSAGE (v1, C++), SEND_MESSAGE_V2 (ali-ons)
                    writer.write(_answer(0, 0, opaque, {"msgId": "7F00000100002A9F0000000000000000", "queueId": "0",
                                                        "queueOffset": "0"}))
                else:
                    writer.write(_answer(0, 0, opaque))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port.append(server.sockets[0].getsockname()[1])
    opt = {"nameSrv": f"127.0.0.1:{port[0]}", "group": "pg", "topic": "TopicTest",
           "messages": [{"tags": "TagA", "keys": ["order-1"], "props": {"p": "v é"}, "body": "hello"}]}
    proc = await asyncio.create_subprocess_exec(*argv, "produce", json.dumps(opt), cwd=str(CLIENTS),
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                env=dict(os.environ, HOME=home))
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        if proc.returncode is None:
            proc.kill()
        server.close()
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    sent = [line for line in lines if "status" in line]
    assert proc.returncode == 0 and sent and sent[0]["status"] in ("SEND_OK", "OK"), \
        f"rc={proc.returncode}\n{out.decode()}\n{err.decode()[-3000:]}"
    return frames


@pytest.mark.parametrize("kind", ["ons", "cpp"])
def test_live_client_headers(kind, tmp_path):
    check_installed()
    argv = ["node", str(CLIENTS / "ons.js")] if kind == "ons" else [str(CPP_PYTHON), str(CLIENTS / "cpp_client.py")]
    frames = asyncio.run(_record(argv, str(tmp_path / "home")))
    codes = []
    for stype, raw in frames:
        assert stype == 0  # both clients only ever send JSON
        codes.append(decode_all(raw)[0])
    send = next(decode_all(raw) for _, raw in frames if decode_all(raw)[0] in (10, 310))
    ext = send[6]
    if kind == "ons":
        assert send[0] == 310 and send[1] == "JAVA" and ext["b"] == "TopicTest" and ext["a"] == "pg"
        assert "p\x01v é\x02" in ext["i"]
    else:
        assert send[0] == 10 and send[1] == "CPP" and ext["topic"] == "TopicTest" and ext["producerGroup"] == "pg"
        assert "p\x01v é\x02" in ext["properties"]
    assert codes[0] == 105  # the route lookup comes first
