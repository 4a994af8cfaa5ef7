"""PlainAccessValidator: RocketMQ 4.x ACL over remoting, with accounts from a `plain_acl.yml`.

What a request must pass, in RocketMQ's order (PlainPermissionManager.validate):
1. a peer matching `globalWhiteRemoteAddresses` passes unsigned;
2. it must carry an AccessKey that names an account;
3. a peer matching that account's `whiteRemoteAddress` passes unsigned;
4. Signature = base64(HMAC-SHA1(secretKey, values of every other extField ordered by key, then
   the body)) must match;
5. admin-only request codes need `admin: true`;
6. every resource the request touches needs the permission: topics PUB or SUB, consumer groups
   (named by their retry topic `%RETRY%<group>`) SUB, from `topicPerms`/`groupPerms` or the
   account's `defaultTopicPerm`/`defaultGroupPerm`.
A refused request gets NO_PERMISSION and its handler never runs, so nothing is stored.
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
from dataclasses import dataclass, field

import msgspec

from broker.common.acl_signature import ACCESS_KEY, SIGNATURE, sign
from broker.common.topic_validator import RETRY_PREFIX
from broker.remoting import codes
from broker.remoting.command import RemotingCommand, ext_string
from broker.store.errors import StoreConfigError

log = logging.getLogger("acl")

# Permission.java
DENY, ANY, PUB, SUB = 1, 2, 4, 8
_PERMS = {"DENY": DENY, "ANY": PUB | SUB, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
# Permission.ADMIN_CODE: topic and subscription-group administration
ADMIN_CODES = frozenset({codes.UPDATE_AND_CREATE_TOPIC, 25, 215, 200, 207})  # create/update broker config/delete


def default_acl_file(config_path: str | None) -> str:
    """Where plain_acl.yml is when no aclFile names it: RocketMQ's conf/ holds it beside broker.conf
    (and proxy.conf), else $ROCKETMQ_HOME/conf, else the working directory."""
    if config_path:
        beside = os.path.join(os.path.dirname(os.path.abspath(config_path)), "plain_acl.yml")
        if os.path.exists(beside) or not os.environ.get("ROCKETMQ_HOME"):
            return beside
    home = os.environ.get("ROCKETMQ_HOME")
    return os.path.join(home, "conf", "plain_acl.yml") if home else os.path.abspath("plain_acl.yml")


class AclError(Exception):
    """A request the ACL refuses; the message is the remark the client sees."""


def _perm(value, key: str) -> int:
    p = _PERMS.get(str(value).strip().upper())
    if p is None:
        raise StoreConfigError(key, f"{value!r} is not one of DENY, PUB, SUB, PUB|SUB, ANY")
    return p


class RemoteAddressMatcher:
    """RocketMQ's whiteRemoteAddress forms: `*`, an exact IPv4, `192.168.1.*` (any segment may be
    `*` or a range `1-100`), `192.168.1.{1,2,3}` (a set in the last segment), or a CIDR."""

    def __init__(self, pattern: str, key: str):
        self.pattern = pattern = pattern.strip()
        self._any = pattern in ("*", "*.*.*.*")
        self._net = None
        self._segments: list | None = None
        if self._any or not pattern:
            return
        if "/" in pattern:
            try:
                self._net = ipaddress.ip_network(pattern, strict=False)
            except ValueError as e:
                raise StoreConfigError(key, f"{pattern!r}: {e}") from None
            return
        m = re.fullmatch(r"(.+)\.\{([\d,\s]+)\}", pattern)
        parts = (m.group(1).split(".") + [m.group(2)]) if m else pattern.split(".")
        if len(parts) != 4:
            raise StoreConfigError(key, f"{pattern!r} is not an IPv4 address pattern")
        segs = []
        for i, part in enumerate(parts):
            part = part.strip()
            if part == "*":
                segs.append(None)
            elif m and i == 3:
                segs.append({int(x) for x in part.split(",") if x.strip()})
            elif re.fullmatch(r"\d+-\d+", part):
                lo, hi = map(int, part.split("-"))
                segs.append(set(range(lo, hi + 1)))
            elif part.isdigit() and int(part) < 256:
                segs.append({int(part)})
            else:
                raise StoreConfigError(key, f"{pattern!r}: segment {part!r} is not a number, range, set or *")
        self._segments = segs

    def matches(self, host: str) -> bool:
        if self._any:
            return True
        if self._net is not None:
            try:
                return ipaddress.ip_address(host) in self._net
            except ValueError:
                return False
        if self._segments is None:
            return False
        try:
            nums = [int(x) for x in host.split(".")]
        except ValueError:
            return False
        return len(nums) == 4 and all(s is None or n in s for s, n in zip(self._segments, nums))


@dataclass
class PlainAccount:
    access_key: str
    secret_key: str
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = SUB
    perms: dict[str, int] = field(default_factory=dict)  # topic or %RETRY%<group> → perm
    white: RemoteAddressMatcher | None = None


def load_plain_acl(path: str) -> tuple[dict[str, PlainAccount], list[RemoteAddressMatcher]]:
    """Read a plain_acl.yml; a missing file or a bad entry raises StoreConfigError naming it."""
    import yaml

    key = f"aclEnable ({path})"
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise StoreConfigError(key, "aclEnable=true but the ACL file does not exist") from None
    except (OSError, yaml.YAMLError) as e:
        raise StoreConfigError(key, f"cannot read the ACL file: {e}") from None
    if not isinstance(doc, dict):
        raise StoreConfigError(key, "the ACL file is not a mapping")
    white = [RemoteAddressMatcher(str(a), f"{path}: globalWhiteRemoteAddresses")
             for a in doc.get("globalWhiteRemoteAddresses") or []]
    accounts: dict[str, PlainAccount] = {}
    for i, a in enumerate(doc.get("accounts") or []):
        where = f"{path}: accounts[{i}]"
        if not isinstance(a, dict) or not a.get("accessKey") or not a.get("secretKey"):
            raise StoreConfigError(where, "an account needs accessKey and secretKey")
        ak, sk = str(a["accessKey"]), str(a["secretKey"])
        if len(ak) < 6 or len(sk) < 6:  # RocketMQ's own rule (PlainAccessResource)
            raise StoreConfigError(where, "accessKey and secretKey must be at least 6 characters")
        if ak in accounts:
            raise StoreConfigError(where, f"accessKey {ak!r} appears twice")
        acc = PlainAccount(ak, sk, bool(a.get("admin", False)),
                           _perm(a.get("defaultTopicPerm", "DENY"), f"{where}.defaultTopicPerm"),
                           _perm(a.get("defaultGroupPerm", "SUB"), f"{where}.defaultGroupPerm"))
        if a.get("whiteRemoteAddress"):
            acc.white = RemoteAddressMatcher(str(a["whiteRemoteAddress"]), f"{where}.whiteRemoteAddress")
        for kind, prefix in (("topicPerms", ""), ("groupPerms", RETRY_PREFIX)):
            for entry in a.get(kind) or []:
                name, eq, perm = str(entry).partition("=")
                if not eq or not name.strip():
                    raise StoreConfigError(f"{where}.{kind}", f"{entry!r} is not name=PERM")
                acc.perms[prefix + name.strip()] = _perm(perm, f"{where}.{kind}")
        accounts[ak] = acc
    return accounts, white


def _group(name) -> str:
    return RETRY_PREFIX + ext_string(name)


def resources(cmd: RemotingCommand) -> dict[str, int]:
    """What a request touches and the permission it needs (PlainAccessResource.parse)."""
    e, c = cmd.ext, cmd.code
    need: dict[str, int] = {}
    if c in (codes.SEND_MESSAGE, codes.SEND_MESSAGE_V2, codes.SEND_BATCH_MESSAGE):
        topic = ext_string(e.get("topic" if c == codes.SEND_MESSAGE else "b", ""))
        need[topic] = SUB if topic.startswith(RETRY_PREFIX) else PUB
    elif c == codes.CONSUMER_SEND_MSG_BACK:
        need[_group(e.get("group", ""))] = SUB
    elif c == codes.QUERY_MESSAGE:  # reading a topic's messages by key, as a consumer reads them
        need[ext_string(e.get("topic", ""))] = SUB
    elif c in (codes.PULL_MESSAGE, codes.POP_MESSAGE):
        need[ext_string(e.get("topic", ""))] = SUB
        need[_group(e.get("consumerGroup", ""))] = SUB
    elif c in (codes.ACK_MESSAGE, codes.CHANGE_MESSAGE_INVISIBLETIME):
        # a message redelivered through %RETRY%<group>_<topic> is acked there: the group's
        # permission covers it, as its own retry topic's does
        topic = ext_string(e.get("topic", ""))
        if not topic.startswith(RETRY_PREFIX):
            need[topic] = SUB
        need[_group(e.get("consumerGroup", ""))] = SUB
    elif c in (codes.QUERY_CONSUMER_OFFSET, codes.UPDATE_CONSUMER_OFFSET):
        need[_group(e.get("consumerGroup", ""))] = SUB
        need[ext_string(e.get("topic", ""))] = SUB
    elif c in (codes.UNREGISTER_CLIENT, codes.GET_CONSUMER_LIST_BY_GROUP):
        if e.get("consumerGroup"):
            need[_group(e["consumerGroup"])] = SUB
    elif c == codes.BATCH_ACK_MESSAGE:
        try:
            for a in msgspec.json.decode(bytes(cmd.body or b"{}")).get("acks") or []:
                need[ext_string(a.get("t", ""))] = SUB
                need[_group(a.get("c", ""))] = SUB
        except (msgspec.DecodeError, AttributeError, TypeError):
            raise AclError("batch ack body is not BatchAckMessageRequestBody JSON") from None
    elif c == codes.HEART_BEAT and cmd.body:
        try:
            hb = msgspec.json.decode(bytes(cmd.body))
            for cd in hb.get("consumerDataSet") or []:
                need[_group(cd.get("groupName", ""))] = SUB
                for sd in cd.get("subscriptionDataSet") or []:
                    need[ext_string(sd.get("topic", ""))] = SUB
        except (msgspec.DecodeError, AttributeError, TypeError):
            raise AclError("heartbeat body is not HeartbeatData JSON") from None
    return need


def _allowed(needed: int, owned: int) -> bool:
    # Permission.checkPermission
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


class PlainAccessValidator:
    def __init__(self, path: str):
        self.path = path
        self.accounts, self.global_white = load_plain_acl(path)
        self._mtime = os.stat(path).st_mtime_ns
        # an admin account of this broker's own making, not in the file (its local gRPC front's:
        # broker.proxy.local_mode); it outlives reloads of the file
        self.inner: PlainAccount | None = None

    def reload_if_changed(self) -> None:
        """RocketMQ watches plain_acl.yml; an edit takes effect without a restart. A broken edit
        keeps the accounts in force and says why."""
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if mtime == self._mtime:
                return
            self._mtime = mtime
            self.accounts, self.global_white = load_plain_acl(self.path)
            log.info("ACL file %s reloaded: %d accounts", self.path, len(self.accounts))
        except (OSError, StoreConfigError) as e:
            log.error("ACL file %s not reloaded, the previous accounts stay in force: %s", self.path, e)

    def validate(self, cmd: RemotingCommand, peer_host: str) -> None:
        """Raise AclError when the request may not run."""
        ak = cmd.ext.get(ACCESS_KEY)
        acc = self.authenticate(ext_string(ak) if ak else "", peer_host,
                                lambda a: hmac.compare_digest(ext_string(cmd.ext.get(SIGNATURE) or ""),
                                                              sign(cmd.ext, cmd.body, a.secret_key)))
        if acc is None:
            return
        if cmd.code in ADMIN_CODES and not acc.admin:
            raise AclError(f"Need admin permission for request code={cmd.code}, but accessKey={acc.access_key} "
                           "is not")
        self.authorize(acc, resources(cmd))

    def authenticate(self, access_key: str, peer_host: str, signed) -> PlainAccount | None:
        """The account a request acts as, or None for a white-listed peer that needs no check;
        `signed(account)` says whether the request's signature is that account's. Shared by
        remoting and the gRPC front, which sign different content the same way."""
        if any(w.matches(peer_host) for w in self.global_white):
            return None
        if not access_key:
            raise AclError("No accessKey is configured")
        acc = self.accounts.get(access_key)
        if acc is None and self.inner is not None and access_key == self.inner.access_key:
            acc = self.inner
        if acc is None:
            raise AclError(f"No acl config for {access_key}")
        if acc.white is not None and acc.white.matches(peer_host):
            return None
        if not signed(acc):
            raise AclError("Check signature failed for accessKey=" + acc.access_key)
        return acc

    def authorize(self, acc: PlainAccount, need: dict[str, int]) -> None:
        """Every resource in `need` (topic, or %RETRY%<group>) must be allowed to `acc`."""
        if not need or (acc.admin and not acc.perms):
            return
        for res, perm in need.items():
            is_group = res.startswith(RETRY_PREFIX)
            owned = acc.perms.get(res)
            if owned is None:
                owned = acc.default_group_perm if is_group else acc.default_topic_perm
            if not _allowed(perm, owned):
                what = f"group {res[len(RETRY_PREFIX):]}" if is_group else f"topic {res}"
                needs = {PUB: "PUB", SUB: "SUB"}.get(perm, "PUB or SUB")
                raise AclError(f"No permission for {what} (needs {needs}), accessKey={acc.access_key}")
