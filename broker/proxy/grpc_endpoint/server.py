"""GrpcServer: the part of grpc.aio.server's surface the front uses, on our own HTTP/2 endpoint.
The generated add_MessagingServiceServicer_to_server registers through add_generic_rpc_handlers and
add_registered_method_handlers unchanged; handlers are grpcio's RpcMethodHandler objects."""
from __future__ import annotations

import asyncio
import logging
import socket

from broker.kernels.h2_session import DEFAULT_MAX_MESSAGE
from broker.proxy.grpc_endpoint.connection import LINGER_S, H2Connection

log = logging.getLogger("proxy")


class _CallDetails:
    """What a generic handler's service() reads (grpc.HandlerCallDetails)."""
    __slots__ = ("method", "invocation_metadata")

    def __init__(self, method: str):
        self.method = method
        self.invocation_metadata = ()


def _listening_socket(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or None
    family, kind, proto, _, sockaddr = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class GrpcServer:
    def __init__(self, max_message: int = DEFAULT_MAX_MESSAGE):
        self.max_message = max_message
        self.loop = None
        self.connections: set[H2Connection] = set()
        self.stopping = False
        self._methods: dict[str, object] = {}
        # path -> fast(request, context): a unary method's answer without a task (Call.run_now)
        self.fast: dict[str, object] = {}
        self.fast_raw: set[str] = set()  # paths whose fast answer reads the request's bytes
        self._routes: dict[str, tuple] = {}  # path -> route_of(path), made on first use
        self._generic: list = []
        self._ports: list[tuple[socket.socket, object]] = []
        self._servers: list[asyncio.AbstractServer] = []
        self._idle: asyncio.Event | None = None
        self._all_closed: asyncio.Event | None = None

    # -- handlers (grpc.Server's registration methods) -----------------------------------------------
    def add_generic_rpc_handlers(self, generic_rpc_handlers) -> None:
        self._generic.extend(generic_rpc_handlers)
        self._routes.clear()

    def add_registered_method_handlers(self, service_name: str, method_handlers: dict) -> None:
        for method, handler in method_handlers.items():
            self._methods[f"/{service_name}/{method}"] = handler
        self._routes.clear()

    def add_fast_unary(self, path: str, fast, raw: bool = False) -> None:
        """`fast(request, context)` answers calls of the unary method `path` when it can: (a future,
        a function of it giving the response), the response's bytes when it is known at once (no
        future, no function: written with the read's flush), or None, and the method's handler
        runs as a task.
        A task, a coroutine chain and the servicer's wrappers cost more than a short call itself.
        `raw`: `request` is the message's bytes, not deserialized (fast reads them itself)."""
        self.fast[path] = fast
        if raw:
            self.fast_raw.add(path)
        else:
            self.fast_raw.discard(path)
        self._routes.clear()

    def add_fast_stream(self, path: str, fast, raw: bool = False) -> None:
        """`fast(request, context)` answers calls of the server-streaming method `path` (one request
        message, deserialized) when it can: the whole answer framed (a Framed or bytes: written at once with
        the OK trailers, no task), an async iterator of the responses still to come (run in a task
        as the handler's would be), or None before doing anything, and the method's handler runs.
        `raw`: `request` is the message's bytes, not deserialized (fast reads them itself)."""
        self.fast[path] = fast
        if raw:
            self.fast_raw.add(path)
        else:
            self.fast_raw.discard(path)
        self._routes.clear()

    def route_of(self, path: str) -> tuple:
        """(handler_of(path), its fast answer or None, whether that reads the raw bytes): one
        lookup a call instead of three."""
        route = self._routes.get(path)
        if route is None:
            route = (self.handler_of(path), self.fast.get(path), path in self.fast_raw)
            if len(self._routes) < 10_000:  # a client's unknown paths are remembered, up to a bound
                self._routes[path] = route
        return route

    def handler_of(self, path: str):
        """The RpcMethodHandler of `path` (/package.Service/Method), or None (UNIMPLEMENTED)."""
        handler = self._methods.get(path)
        if handler is None and path not in self._methods:
            details = _CallDetails(path)
            for generic in self._generic:
                handler = generic.service(details)
                if handler is not None:
                    break
            if len(self._methods) < 10_000:  # a client's unknown paths are remembered, up to a bound
                self._methods[path] = handler
        return handler

    # -- ports ----------------------------------------------------------------------------------------
    def add_insecure_port(self, address: str) -> int:
        """Bind now (as grpcio does); the port bound, or 0 when the address cannot be listened on."""
        return self._add_port(address, None)

    def add_secure_port(self, address: str, ssl_context) -> int:
        """TLS with an ssl.SSLContext (ALPN h2: broker.proxy.tls.server_ssl_context)."""
        return self._add_port(address, ssl_context)

    def _add_port(self, address: str, ssl_context) -> int:
        try:
            sock = _listening_socket(address)
        except (OSError, ValueError) as e:
            log.error("cannot listen on %s: %s", address, e)
            return 0
        self._ports.append((sock, ssl_context))
        return sock.getsockname()[1]

    # -- life -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        for sock, ssl_context in self._ports:
            self._servers.append(await self.loop.create_server(lambda: H2Connection(self), sock=sock,
                                                               ssl=ssl_context))

    async def stop(self, grace: float | None) -> None:
        """No new connections; GOAWAY on each (no new streams); the calls in flight finish within
        `grace` seconds, then the ones left are cancelled and the connections closed."""
        self.stopping = True
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.goaway()
        if grace and any(c.calls for c in self.connections):
            self._idle = asyncio.Event()
            try:
                await asyncio.wait_for(self._idle.wait(), grace)
            except asyncio.TimeoutError:
                pass
        for conn in list(self.connections):
            conn.abort()
        if self.connections:  # each closes once its client has read our last frames (H2Connection._close)
            self._all_closed = asyncio.Event()
            try:
                await asyncio.wait_for(self._all_closed.wait(), LINGER_S + 0.5)
            except asyncio.TimeoutError:
                pass
        for server in self._servers:
            await server.wait_closed()
        await asyncio.sleep(0)  # the connections' transports close on the loop's next turn

    def connection_gone(self) -> None:
        if self._idle is not None and not any(c.calls for c in self.connections):
            self._idle.set()
        if self._all_closed is not None and not self.connections:
            self._all_closed.set()

    async def wait_for_termination(self) -> None:
        for server in self._servers:
            await server.serve_forever()
