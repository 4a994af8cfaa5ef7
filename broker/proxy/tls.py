"""TLS on the gRPC front, optional as on RocketMQ 5's proxy. The keys are the proxy's
(ProxyConfig tlsTestModeEnable, tlsKeyPath, tlsCertPath) and TlsSystemConfig's tls.server.mode;
broker.conf and proxy.conf also take TlsSystemConfig's names of the three (tls.test.mode.enable,
tls.server.keyPath, tls.server.certPath: broker.server.broker_config.TLS_SYSTEM_CONFIG_KEYS).

tls.server.mode: "disabled" (this front's default: plaintext) or "enforcing" (TLS only). The Java
proxy's default, "permissive", sniffs each connection and serves TLS and plaintext on one port;
this front serves one or the other on a port, so permissive is refused naming the key rather than
quietly serving one of the two. In enforcing mode, tlsTestModeEnable (true by default, as the Java
proxy's) serves a self-signed certificate made at start; false serves tlsCertPath and tlsKeyPath
(PEM, the key unencrypted), which must be readable when the front starts.
"""
from __future__ import annotations

import shutil
import ssl

from broker.remoting.tls import TLS_MODES, load_key_and_cert, read_pem, self_signed
from broker.store.errors import StoreConfigError


def check_tls(config) -> None:
    """Refuse a TLS setting the front could not serve, naming its key (at start, before listening)."""
    if config.tlsMode not in TLS_MODES:
        raise StoreConfigError("tls.server.mode", f"{config.tlsMode!r} is not one of {', '.join(TLS_MODES)}")
    if config.tlsMode == "permissive":
        raise StoreConfigError("tls.server.mode", "permissive (TLS and plaintext on one port) is not served by "
                                                  "this front: choose enforcing (TLS) or disabled (plaintext)")
    if config.tlsMode != "enforcing":
        return
    if config.tlsTestModeEnable:
        if shutil.which("openssl") is None:
            raise StoreConfigError("tlsTestModeEnable", "the self-signed certificate of test mode is made by the "
                                   "openssl command, which is not on PATH: set tlsTestModeEnable=false with "
                                   "tlsCertPath and tlsKeyPath")
        return
    read_pem("tlsCertPath", config.tlsCertPath, "certificate chain")
    read_pem("tlsKeyPath", config.tlsKeyPath, "private key")


def server_ssl_context(config) -> ssl.SSLContext | None:
    """The front's SSLContext (ALPN h2, as gRPC requires) for tls.server.mode=enforcing; None for a
    plaintext front."""
    check_tls(config)
    if config.tlsMode != "enforcing":
        return None
    if config.tlsTestModeEnable:
        key, cert = self_signed("tlsTestModeEnable")
    else:
        key = read_pem("tlsKeyPath", config.tlsKeyPath, "private key")
        cert = read_pem("tlsCertPath", config.tlsCertPath, "certificate chain")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # HTTP/2 over TLS needs 1.2 or later (RFC 9113 9.2)
    ctx.set_alpn_protocols(["h2"])
    load_key_and_cert(ctx, key, cert, "tlsCertPath")
    return ctx
