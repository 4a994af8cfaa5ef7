"""Every seed input and every crash input the fuzzers ever found (tools/fuzz/, `make fuzz`),
replayed through the same checks on the normal build: kernel equals twin, and the Python decoders
above them refuse with their typed errors instead of crashing."""
from __future__ import annotations

from pathlib import Path

import pytest

from tools.fuzz.checks import CHECKS, check_frames, check_properties

REPO = Path(__file__).resolve().parents[1]
CASES = [(name, p) for name in CHECKS
         for d in (REPO / "tools" / "fuzz" / "seeds" / name, REPO / "tests" / "fuzz_regressions" / name)
         if d.exists() for p in sorted(d.iterdir())]


@pytest.mark.parametrize("name,path", CASES, ids=[f"{n}/{p.parent.parent.name}/{p.name[:12]}" for n, p in CASES])
def test_replay(name, path):
    CHECKS[name](path.read_bytes())


def test_every_check_has_seeds():
    for name in CHECKS:
        assert any(n == name for n, _ in CASES), f"no seed corpus for the {name} check"


def test_a_property_without_a_value_is_absent_as_in_java():
    # the fuzzer's first find: "KEYS\x01" at the end made the Python decoder report KEYS="" while the
    # store's parse (and Java's string2messageProperties) skip a pair with an empty value
    check_properties(b"S\x01b\x02KEYS\x01bS\x01b\x02KEYS\x01")
    from broker.store.message import decode_properties
    assert decode_properties(b"KEYS\x01a\x02KEYS\x01") == {"KEYS": "a"}
    assert decode_properties(b"\x01v\x02TAGS\x01x\x01y") == {"TAGS": "x\x01y"}


def test_a_numeric_ext_field_is_held_as_java_holds_it():
    # the fuzzer's second find was the check's own strictness: {"ge": 310} decodes to 310 and
    # re-encodes as "310", which is what Java's HashMap<String,String> holds; both sign alike
    from broker.remoting.command import RemotingCommand
    hdr = b'{"code":310,"opaque":4,"flag":0,"extFields":{"ge":310,"b":true}}'
    prefix = (4 + len(hdr)).to_bytes(4, "big") + len(hdr).to_bytes(4, "big")
    check_frames(b"\x00\x00\x00" + prefix + hdr)
    assert RemotingCommand.decode(hdr, b"").get_str("ge") == "310"


def test_an_integer_python_will_not_convert_is_a_header_error():
    # found writing the header twin: an ext value of more than 4300 digits parses (it is JSON) but
    # int() refuses it with a bare ValueError, which decode_header must turn into its typed refusal
    from broker.kernels.header import HeaderError, decode_header
    from tools.fuzz.checks import check_headers
    raw = b'{"code":1,"extFields":{"n":1' + b"0" * 4400 + b"}}"
    check_headers(b"\x08" + raw)
    with pytest.raises(HeaderError) as e:
        decode_header(0, raw, 0, len(raw))
    assert e.value.offset == raw.index(b"10")
