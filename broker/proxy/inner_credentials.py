"""The front's own credentials toward brokers with aclEnable: every remoting request it makes is
signed with them (broker.client.acl_hook), after the 5.x client's own call passed the front's ACL.

- Local mode: the broker makes an admin account for its in-process front at each start
  (PlainAccessValidator.inner, never written to plain_acl.yml). RocketMQ's local mode calls the
  broker past its ACL: this is the same trust, while the front's requests still take the path
  (and the checks) of any remoting request.
- Cluster mode: `enableAclRpcHookForClusterMode=true` signs with the accessKey/secretKey of
  tools.yml (RocketMQ's conf/tools.yml, the account its admin tools use), as the Java proxy does.
"""
from __future__ import annotations

import os
import secrets

from broker.client.acl_hook import SessionCredentials
from broker.store.errors import StoreConfigError


def default_tools_file(config_path: str | None) -> str:
    """tools.yml beside proxy.conf, else $ROCKETMQ_HOME/conf/tools.yml."""
    beside = os.path.join(os.path.dirname(os.path.abspath(config_path)), "tools.yml") if config_path else ""
    home = os.environ.get("ROCKETMQ_HOME")
    if beside and (os.path.exists(beside) or not home):
        return beside
    return os.path.join(home, "conf", "tools.yml") if home else os.path.abspath("tools.yml")


def load_tools_yml(path: str) -> SessionCredentials:
    import yaml

    key = f"enableAclRpcHookForClusterMode ({path})"
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise StoreConfigError(key, "the front signs its requests to brokers with tools.yml's accessKey and "
                                    "secretKey, and the file does not exist") from None
    except (OSError, yaml.YAMLError) as e:
        raise StoreConfigError(key, f"cannot read tools.yml: {e}") from None
    ak, sk = (str(doc.get(k) or "") if isinstance(doc, dict) else "" for k in ("accessKey", "secretKey"))
    if not ak or not sk:
        raise StoreConfigError(key, "tools.yml needs accessKey and secretKey")
    return SessionCredentials(ak, sk)


def for_front(config) -> SessionCredentials | None:
    """What a cluster-mode front signs with: tools.yml's account with
    enableAclRpcHookForClusterMode, or nothing (local mode: local_account)."""
    if config.enableAclRpcHookForClusterMode:
        return load_tools_yml(config.aclToolsFile)
    return None


def local_account(validator) -> SessionCredentials:
    """A fresh admin account in the broker's `validator` for its local front (never written to
    plain_acl.yml; a new one at each start)."""
    from broker.server.plain_access_validator import PlainAccount

    account = PlainAccount(f"local-front-{secrets.token_hex(6)}", secrets.token_urlsafe(32), admin=True)
    validator.inner = account
    return SessionCredentials(account.access_key, account.secret_key)
