"""The broker: what `broker serve` runs, laid out by Apache RocketMQ's broker module.

RocketMQ keeps transport apart from the broker: `rocketmq-remoting` is frames, commands and
connections; `rocketmq-broker` is the BrokerController and its processors, managers and services.
Here the transport is `broker.remoting` and the broker is this package (named `server` because the
project's top package is already called `broker`):

- `broker_controller`, `broker_config`: the BrokerController and BrokerConfig;
- `processor/`: one request processor per family of request codes (send, pull, consumer, admin,
  query, subscription group, end transaction, pop, ack, change invisible time);
- `topic/`, `subscription/`: the topic and subscription-group managers;
- `client/`: the consumer, producer and rebalance-lock managers (the broker's view of its clients;
  `broker.client` is the client library);
- `longpolling/`, `schedule/`, `transaction/`, `pop/`, `slave/`, `controller/` (the ReplicasManager
  of controller mode), `filter/`, `metrics/`.

Imports go one way: `broker.remoting` and `broker.common` never import this package.
"""
