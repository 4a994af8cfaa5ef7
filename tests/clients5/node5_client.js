'use strict';
// Drives the official RocketMQ 5.x Node.js client, npm rocketmq-client-nodejs 1.0.8 (gRPC,
// apache.rocketmq.v2), unmodified, for tests/test_grpc_node.py; the node_modules beside it are its own.
//   node node5_client.js produce '<json>'  one JSON line per send (receipt or error), then {"done":true}
//   node node5_client.js receive '<json>'  SimpleConsumer: receive until `count` messages were handled
//                                          (or `rounds` receives came back empty), one line per message
//   node node5_client.js consume '<json>'  PushConsumer: one line per delivery to the listener, until
//                                          stdin closes or SIGTERM; then shutdown and {"closed":true}
//                                          (the protocol of tests/clients/ons.js consume)
// Options: endpoints (the front's host:port), topic, group, expression, mode "sync" | "async" (await
//   each send, or all at once), messages [{tag, keys, props, body, group (FIFO message group),
//   delaySeconds}], transaction "commit" | "rollback" | "unknown" (each message a transaction of its
//   own, ended so; "unknown" leaves it to the broker's check), checker "commit" | "rollback" (what the
//   check-back answers), checks N (stay until N checks came, then until stdin closes).
//   receive: count, invisibleSeconds, awaitSeconds, rounds, changeInvisible (change each message's
//   invisible time once before acking), pauseAfter N (after N messages print {"paused":true} and
//   wait for a line on stdin), ackFirst N (of the messages before the pause, or of all, ack only the
//   first N; the rest stay unacked).
//   push: fail "always" (the listener answers FAILURE), consumeMs (the listener's time per message).
const {
  Producer, SimpleConsumer, PushConsumer, ConsumeResult,
} = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const [ cmd, raw ] = process.argv.slice(2);
const opt = JSON.parse(raw);
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const fmt = a => a.map(x => (x instanceof Error ? x.stack : String(x))).join(' ');
// the default logger writes ~/logs/rocketmq: errors go to stderr, the test's log instead
const logger = { info() {}, debug() {}, warn(...a) { process.stderr.write(`warn ${fmt(a)}\n`); },
  error(...a) { process.stderr.write(`error ${fmt(a)}\n`); } };
const common = { endpoints: opt.endpoints, namespace: '', logger, requestTimeout: 10000 };
const errorOf = err => ({ error: `${err.name}: ${err.message}`, code: err.code === undefined ? null : err.code });

function build(m) {
  const msg = { topic: opt.topic, body: Buffer.from(m.body === undefined ? 'x' : m.body) };
  if (m.tag) msg.tag = m.tag;
  if (m.keys) msg.keys = m.keys;
  if (m.props) msg.properties = new Map(Object.entries(m.props));
  if (m.group) msg.messageGroup = m.group;
  if (m.delaySeconds) msg.delay = m.delaySeconds * 1000;
  return msg;
}

const receipt = r => ({ messageId: r.messageId, transactionId: r.transactionId, offset: Number(r.offset) });

function view(m) {
  return { topic: m.topic, body: m.body.toString(), tag: m.tag || null, keys: [ ...m.keys ].sort(), props: Object.fromEntries(m.properties),
    messageId: m.messageId, deliveryAttempt: m.deliveryAttempt, group: m.messageGroup || null,
    corrupted: !!m.corrupted, offset: Number(m.offset) };
}

function untilStdinCloses() {
  return new Promise(resolve => {
    process.stdin.on('end', resolve);
    process.on('SIGTERM', resolve);
    process.stdin.resume();
  });
}

async function produce() {
  let checks = 0;
  let checked = () => {};
  const enough = new Promise(resolve => { checked = resolve; });
  const checker = {
    async check(m) {
      out({ checked: m.messageId, topic: m.topic, tag: m.tag || null });
      if (++checks >= (opt.checks || 0)) checked();
      return opt.checker === 'rollback' ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
    },
  };
  const producer = new Producer({ ...common, topic: opt.topic, checker });
  await producer.startup();
  const pending = [];
  for (const m of opt.messages) {
    try {
      if (opt.transaction) {
        const tx = producer.beginTransaction();
        const r = await producer.send(build(m), tx);
        if (opt.transaction === 'commit') await tx.commit();
        else if (opt.transaction === 'rollback') await tx.rollback();
        out(receipt(r));
      } else if (opt.mode === 'async') {
        pending.push(producer.send(build(m)));
      } else {
        out(receipt(await producer.send(build(m))));
      }
    } catch (err) { // the client's own exception types: the test reads the text
      out(errorOf(err));
    }
  }
  for (const r of await Promise.allSettled(pending)) {
    out(r.status === 'fulfilled' ? receipt(r.value) : errorOf(r.reason));
  }
  if (opt.checks) { // the checker's EndTransaction leaves after check() returns: the test closes
    await enough; // stdin once a consumer saw its effect
    await untilStdinCloses();
  }
  await producer.shutdown();
  out({ done: true });
  process.exit(0); // the client's timers would keep node alive
}

async function receive() {
  const consumer = new SimpleConsumer({ ...common, consumerGroup: opt.group,
    subscriptions: new Map([ [ opt.topic, opt.expression || '*' ] ]), awaitDuration: (opt.awaitSeconds || 2) * 1000 });
  await consumer.startup();
  const invisible = (opt.invisibleSeconds || 15) * 1000;
  let handled = 0;
  let empty = 0;
  while (handled < opt.count && empty < (opt.rounds || 10)) {
    let msgs;
    try {
      msgs = await consumer.receive(32, invisible);
    } catch (err) {
      out(errorOf(err));
      break;
    }
    empty = msgs.length ? 0 : empty + 1;
    for (const m of msgs) {
      if (opt.changeInvisible) await consumer.changeInvisibleDuration(m, invisible);
      const beforePause = opt.pauseAfter === undefined || handled < opt.pauseAfter;
      if (opt.ackFirst === undefined || handled < opt.ackFirst || !beforePause) await consumer.ack(m);
      handled++;
      out(view(m));
      if (handled === opt.pauseAfter) {
        out({ paused: true });
        await new Promise(resolve => { process.stdin.once('data', resolve); process.stdin.resume(); });
        process.stdin.pause();
      }
    }
  }
  await consumer.shutdown();
  out({ done: true });
  process.exit(0);
}

async function consume() {
  const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
  const consumer = new PushConsumer({ ...common, consumerGroup: opt.group,
    subscriptions: new Map([ [ opt.topic, opt.expression || '*' ] ]),
    messageListener: {
      async consume(m) {
        if (opt.consumeMs) await sleep(opt.consumeMs);
        // failBodies: fail every delivery of these messages (and only these)
        const failing = opt.fail === 'always' || (opt.failBodies || []).includes(m.body.toString());
        out({ ...view(m), failing });
        return failing ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
      },
    } });
  await consumer.startup();
  out({ ready: true });
  await untilStdinCloses();
  await consumer.shutdown();
  out({ closed: true });
  process.exit(0);
}

({ produce, receive, consume })[cmd]().catch(err => {
  out({ fatal: `${err.name}: ${err.message}` });
  process.stderr.write(`${err.stack}\n`);
  process.exit(1);
});
