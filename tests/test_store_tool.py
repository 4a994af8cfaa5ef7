"""tools/store_tool.py reads a store written by the broker and spots a damaged record."""
import asyncio
import os
import subprocess
import sys

from broker.services.message_store import MessageStore

TOOL = os.path.join(os.path.dirname(os.path.dirname(__file__)), "tools", "store_tool.py")


def tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def test_verify_dump_and_cq(store_config):
    cfg = store_config()
    rs = []

    async def go():
        async with MessageStore(cfg) as s:
            for i in range(500):
                rs.append(await s.put("Tool", i % 2, b"body-%d" % i + b"." * 3000, {"TAGS": "t", "KEYS": "k%d" % i}))
    asyncio.run(go())
    root = cfg.storePathRootDir
    r = tool("verify", root)
    assert r.returncode == 0 and "ok: 500 records" in r.stdout
    r = tool("dump", root, "--limit", "2")
    assert "Tool:0@0" in r.stdout and "Tool:1@0" in r.stdout and rs[1].msg_id in r.stdout
    r = tool("cq", root, "Tool", "1", "--limit", "3")
    assert f"offset={rs[1].physical_offset} size={rs[1].size}" in r.stdout
    # flip one body byte of record 7: verify names its offset
    seg = cfg.mappedFileSizeCommitLog
    off = rs[7].physical_offset
    with open(os.path.join(cfg.commitlog_dir, "%020d" % (off - off % seg)), "r+b") as f:
        f.seek(off % seg + 100)
        b = f.read(1)
        f.seek(off % seg + 100)
        f.write(bytes([b[0] ^ 0xFF]))
    r = tool("verify", root)
    assert r.returncode == 1 and f"offset {off}" in r.stdout and "CRC" in r.stdout
