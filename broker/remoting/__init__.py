"""RocketMQ 4.x remoting: frames, commands, the asyncio server and client connections."""
