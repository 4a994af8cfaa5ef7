"""TLS on the remoting port (RocketMQ's TlsSystemConfig and its TlsModeHandler), for the broker, the
name server and the clients.

tls.server.mode:
- "disabled": plaintext only (this project's default);
- "permissive" (RocketMQ's default): TLS and plaintext on one port. The first byte of a connection
  tells them apart, as Netty's TlsModeHandler does: 0x16 opens a TLS handshake record, a remoting
  frame starts with the high byte of its length (a frame over 352 MiB would be needed to begin with
  0x16, and the server refuses frames over 16 MiB). The byte is peeked (MSG_PEEK), never consumed;
- "enforcing": TLS only.
The server's certificate: with tls.test.mode.enable (true by default, as RocketMQ's) a self-signed
one made at start by the openssl command (Netty's SelfSignedCertificate); otherwise
tls.server.certPath and tls.server.keyPath (PEM, the key unencrypted), read at start.

A client (tls.enable=true, the Java client's -Dtls.enable / setUseTLS) speaks TLS to every name
server and broker; in test mode (tls.test.mode.enable) it trusts any certificate, as RocketMQ's
InsecureTrustManagerFactory, else it verifies against tls.client.trustCertPath.
"""
from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import tempfile

from broker.store.errors import StoreConfigError

TLS_MODES = ("disabled", "permissive", "enforcing")
TLS_RECORD_HANDSHAKE = 0x16


def read_pem(key: str, path: str, what: str) -> bytes:
    if not path:
        raise StoreConfigError(key, f"is empty: TLS without test mode (tls.test.mode.enable=false) needs the {what}")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise StoreConfigError(key, f"{path}: {e.strerror}") from None
    if b"-----BEGIN " not in data:
        raise StoreConfigError(key, f"{path} is not a PEM file (the {what})")
    if key.lower().endswith("keypath") and b"ENCRYPTED" in data:
        raise StoreConfigError(key, f"{path} is an encrypted key: only unencrypted PEM keys are read")
    return data


def self_signed(key_name: str = "tls.test.mode.enable") -> tuple[bytes, bytes]:
    """(key, certificate) made now for localhost and 127.0.0.1, as Netty's SelfSignedCertificate."""
    if shutil.which("openssl") is None:
        raise StoreConfigError(key_name, "the self-signed certificate of test mode is made by the openssl command, "
                                         "which is not on PATH: set it to false and give a certificate and key")
    with tempfile.TemporaryDirectory(prefix="tls-") as d:
        key, cert = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
        r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365",
                            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                            "-keyout", key, "-out", cert], capture_output=True, text=True)
        if r.returncode != 0:
            raise StoreConfigError(key_name, f"openssl could not make a self-signed certificate: "
                                             f"{r.stderr.strip()[-300:]}")
        with open(key, "rb") as k, open(cert, "rb") as c:
            return k.read(), c.read()


def check_mode(mode: str) -> str:
    if mode not in TLS_MODES:
        raise StoreConfigError("tls.server.mode", f"{mode!r} is not one of {', '.join(TLS_MODES)}")
    return mode


def server_context(mode: str, test_mode: bool, cert_path: str, key_path: str) -> ssl.SSLContext | None:
    """The remoting server's SSLContext for `mode` (None when disabled); refuses what it cannot
    serve, naming the key."""
    if check_mode(mode) == "disabled":
        return None
    if test_mode:
        key, cert = self_signed()
    else:
        key = read_pem("tls.server.keyPath", key_path, "private key")
        cert = read_pem("tls.server.certPath", cert_path, "certificate chain")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    load_key_and_cert(ctx, key, cert, "tls.server.certPath")
    return ctx


def load_key_and_cert(ctx: ssl.SSLContext, key: bytes, cert: bytes, cert_key: str) -> None:
    """PEM bytes into a server context (load_cert_chain reads files only: a private temporary
    directory holds them meanwhile); a pair that does not load is refused naming `cert_key`."""
    with tempfile.TemporaryDirectory(prefix="tls-") as d:
        kp, cp = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
        with open(kp, "wb") as f:
            f.write(key)
        with open(cp, "wb") as f:
            f.write(cert)
        try:
            ctx.load_cert_chain(cp, kp)
        except ssl.SSLError as e:
            raise StoreConfigError(cert_key, f"the certificate and key do not load: {e}") from None


def client_context(trust_cert_path: str = "", test_mode: bool = True) -> ssl.SSLContext:
    """A client's SSLContext: any certificate trusted in test mode, else tls.client.trustCertPath's."""
    if test_mode:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    read_pem("tls.client.trustCertPath", trust_cert_path, "trusted certificates")
    return ssl.create_default_context(cafile=trust_cert_path)
