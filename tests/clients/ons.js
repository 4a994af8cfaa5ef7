'use strict';
// Drives the real npm client ali-ons for tests/test_real_clients.py, unmodified.
//   node ons.js produce '<json>'   one JSON line per send result (or error), then {"done":true}
//   node ons.js consume '<json>'   one JSON line per delivery, until SIGTERM or stdin closes;
//                                  then consumer.close() (commits offsets) and {"closed":true}
// Options: nameSrv, group, topic, expression, instanceName, accessKey, secretKey, consumeFromWhere,
//   messages [{tags, keys:[..], props:{}, body (utf8) | size (bytes of 'x')}],
//   fail: "always" | "once" (ACTION_RETRY on a message's first delivery), maxReconsumeTimes.
const { Producer, Consumer, Message } = require('ali-ons');

const [cmd, raw] = process.argv.slice(2);
const opt = JSON.parse(raw);
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const quiet = { info() {}, warn() {}, debug() {}, error(...a) { process.stderr.write(a.join(' ') + '\n'); } };
const common = {
  httpclient: {}, // ali-ons asserts one even when nameSrv is given; it is not used then
  nameSrv: opt.nameSrv,
  logger: quiet,
  instanceName: opt.instanceName || `ons-${process.pid}`, // clientId = ip@instanceName: one per process
};
if (opt.accessKey) Object.assign(common, { accessKey: opt.accessKey, secretKey: opt.secretKey });

async function produce() {
  const producer = new Producer(Object.assign({ producerGroup: opt.group }, common));
  producer.on('error', err => process.stderr.write(`producer error: ${err.message}\n`));
  await producer.ready();
  for (const m of opt.messages) {
    const body = m.size ? Buffer.alloc(m.size, 'x') : Buffer.from(m.body);
    const msg = new Message(opt.topic, m.tags || null, body);
    if (m.keys) msg.keys = m.keys;
    for (const [k, v] of Object.entries(m.props || {})) msg.properties[k] = v;
    try {
      const r = await producer.send(msg);
      out({ status: r.sendStatus, msgId: r.msgId, queueId: r.messageQueue.queueId, queueOffset: r.queueOffset });
    } catch (err) {
      out({ error: err.message, code: err.code || null });
    }
  }
  try {
    await producer.close(); // unregisters: refused too when the key is wrong
  } catch (err) {
    process.stderr.write(`producer close: ${err.message}\n`);
  }
  out({ done: true });
  process.exit(0); // the client's timers would keep node alive
}

async function consume() {
  const consumer = new Consumer(Object.assign({
    consumerGroup: opt.group,
    maxReconsumeTimes: opt.maxReconsumeTimes === undefined ? 16 : opt.maxReconsumeTimes,
    rebalanceInterval: opt.rebalanceInterval || 10000,
  }, opt.consumeFromWhere ? { consumeFromWhere: opt.consumeFromWhere } : {}, common));
  consumer.on('error', err => process.stderr.write(`consumer error: ${err.message}\n`));
  consumer.subscribe(opt.topic, opt.expression || '*', async msg => {
    const failing = opt.fail === 'always' || (opt.fail === 'once' && msg.reconsumeTimes === 0);
    out({
      topic: msg.topic, tags: msg.tags || null, keys: msg.keys || null, props: msg.properties,
      body: msg.body.length > 256 ? null : msg.body.toString(), size: msg.body.length,
      bodyIsX: msg.body.length > 256 ? msg.body.every(b => b === 0x78) : null,
      reconsumeTimes: msg.reconsumeTimes, msgId: msg.msgId, queueId: msg.queueId,
      queueOffset: Number(msg.queueOffset), failing,
    });
    if (!failing) return;
    // ACTION_RETRY is lost for a redelivered message (ali-ons' %RETRY% handler drops the
    // inner handler's value), so only a throw fails those: both ways are exercised
    if (msg.reconsumeTimes === 0) return Consumer.ACTION_RETRY;
    throw new Error(`failing ${msg.msgId} on purpose`);
  });
  await consumer.ready();
  out({ ready: true });
  let closing = false;
  const stop = async () => {
    if (closing) return;
    closing = true;
    await consumer.close();
    out({ closed: true });
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.stdin.on('end', stop);
  process.stdin.resume();
}

(cmd === 'produce' ? produce() : consume()).catch(err => {
  out({ fatal: err.message });
  process.exit(1);
});
