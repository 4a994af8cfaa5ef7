"""The ACL signature a client puts on every request (RocketMQ's AclClientRPCHook and AclUtils):
shared by the client library's hook, the broker's PlainAccessValidator and the gRPC front."""
from __future__ import annotations

import base64
import hashlib
import hmac

from broker.remoting.command import ext_string

# SessionCredentials' extField names
ACCESS_KEY, SIGNATURE, SECURITY_TOKEN = "AccessKey", "Signature", "SecurityToken"


def sign(ext: dict, body, secret_key: str) -> str:
    """The signature a client puts in `Signature` (AclUtils.calSignature over combineRequestContent)."""
    content = "".join(ext_string(ext[k]) for k in sorted(ext) if k != SIGNATURE).encode()
    mac = hmac.new(secret_key.encode(), content, hashlib.sha1)
    if body:
        mac.update(body)
    return base64.b64encode(mac.digest()).decode()
