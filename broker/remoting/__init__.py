"""RocketMQ 4.x remoting, the transport and protocol only: frames (the remoting kernel's glue),
commands, request codes, typed headers, refusals with their response codes, batch bodies, and the
asyncio server and client connections. The broker that answers the requests is `broker.server`;
nothing here imports it."""
