"""Pop consumption (RocketMQ 5's POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME): the
broker keeps what each consumer has in flight, so stateless clients (the gRPC front) consume."""
