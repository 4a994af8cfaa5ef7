"""What the broker, the gRPC front and the client library share beyond the wire: RocketMQ's
rocketmq-common and acl modules (TopicValidator's names and checks, ExtraInfoUtil's receipt
handles, AclUtils' signature). It imports only the transport (`broker.remoting`) and the kernels."""
