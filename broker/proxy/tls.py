"""TLS on the gRPC front, optional as on RocketMQ 5's proxy. The keys are the proxy's
(ProxyConfig tlsTestModeEnable, tlsKeyPath, tlsCertPath) and TlsSystemConfig's tls.server.mode;
broker.conf and proxy.conf also take TlsSystemConfig's names of the three (tls.test.mode.enable,
tls.server.keyPath, tls.server.certPath: broker.server.broker_config.TLS_SYSTEM_CONFIG_KEYS).

tls.server.mode: "disabled" (this front's default: plaintext) or "enforcing" (TLS only). The Java
proxy's default, "permissive", sniffs each connection and serves TLS and plaintext on one port;
grpcio serves one or the other on a port, so permissive is refused naming the key rather than
quietly serving one of the two. In enforcing mode, tlsTestModeEnable (true by default, as the Java
proxy's) serves a self-signed certificate made at start; false serves tlsCertPath and tlsKeyPath
(PEM, the key unencrypted), which must be readable when the front starts.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from broker.store.errors import StoreConfigError

TLS_MODES = ("disabled", "permissive", "enforcing")


def _read_pem(key: str, path: str, what: str) -> bytes:
    if not path:
        raise StoreConfigError(key, f"is empty: tls.server.mode=enforcing with tlsTestModeEnable=false needs the {what}")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise StoreConfigError(key, f"{path}: {e.strerror}") from None
    if b"-----BEGIN " not in data:
        raise StoreConfigError(key, f"{path} is not a PEM file (the {what})")
    if key.endswith("KeyPath") and b"ENCRYPTED" in data:
        raise StoreConfigError(key, f"{path} is an encrypted key: the front reads unencrypted PEM keys only")
    return data


def check_tls(config) -> None:
    """Refuse a TLS setting the front could not serve, naming its key (at start, before listening)."""
    if config.tlsMode not in TLS_MODES:
        raise StoreConfigError("tls.server.mode", f"{config.tlsMode!r} is not one of {', '.join(TLS_MODES)}")
    if config.tlsMode == "permissive":
        raise StoreConfigError("tls.server.mode", "permissive (TLS and plaintext on one port) is not served by "
                                                  "grpcio: choose enforcing (TLS) or disabled (plaintext)")
    if config.tlsMode != "enforcing":
        return
    if config.tlsTestModeEnable:
        if shutil.which("openssl") is None:
            raise StoreConfigError("tlsTestModeEnable", "the self-signed certificate of test mode is made by the "
                                   "openssl command, which is not on PATH: set tlsTestModeEnable=false with "
                                   "tlsCertPath and tlsKeyPath")
        return
    _read_pem("tlsCertPath", config.tlsCertPath, "certificate chain")
    _read_pem("tlsKeyPath", config.tlsKeyPath, "private key")


def _self_signed() -> tuple[bytes, bytes]:
    """(key, certificate) made now, as the Java proxy's SelfSignedCertificate of test mode."""
    with tempfile.TemporaryDirectory(prefix="proxy-tls-") as d:
        key, cert = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
        r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365",
                            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                            "-keyout", key, "-out", cert], capture_output=True, text=True)
        if r.returncode != 0:
            raise StoreConfigError("tlsTestModeEnable", f"openssl could not make a self-signed certificate: "
                                                        f"{r.stderr.strip()[-300:]}")
        with open(key, "rb") as k, open(cert, "rb") as c:
            return k.read(), c.read()


def server_credentials(config):
    """grpc.ServerCredentials for tls.server.mode=enforcing; None for a plaintext front."""
    check_tls(config)
    if config.tlsMode != "enforcing":
        return None
    import grpc
    if config.tlsTestModeEnable:
        key, cert = _self_signed()
    else:
        key = _read_pem("tlsKeyPath", config.tlsKeyPath, "private key")
        cert = _read_pem("tlsCertPath", config.tlsCertPath, "certificate chain")
    return grpc.ssl_server_credentials([(key, cert)])
