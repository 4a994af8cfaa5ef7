"""The gRPC front (RocketMQ 5's proxy): apache.rocketmq.v2.MessagingService for 5.x clients, served
by its own process that reaches brokers through the name server over remoting (cluster mode), or
started by a broker as a supervised child pointed at itself (local mode, grpcServerPort in
broker.conf). `protocol/` holds the stubs generated from the vendored .proto files (make protocol)."""
