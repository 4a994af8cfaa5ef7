package driver;

import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.common.message.Message;

/**
 * Request-reply's requester: DefaultMQProducer.request(msg, timeout), sync (one after another) or
 * async (RequestCallback, all in flight). Options: group, topic, messages, modes (a list of sync |
 * async: the messages requested once in each mode, in turn), timeout (ms).
 * One line per request: {"mode", "i", "correlationId" (the one the request carried),
 * "elapsedMs", "reply": {topic, body, props}} or {"i", "error", "errorClass", "elapsedMs"}.
 */
final class Request {
    private Request() {
    }

    static void run(JSONObject opt) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(opt.getString("group"));
        Options.client(producer, opt);
        producer.start();
        int timeout = opt.containsKey("timeout") ? opt.getIntValue("timeout") : 5000;
        for (Object mode : opt.getJSONArray("modes")) {
            requests(producer, Options.messages(opt), (String) mode, timeout);
        }
        producer.shutdown();
        Out.line("done", true);
    }

    private static void requests(DefaultMQProducer producer, List<Message> messages, String mode, int timeout)
        throws Exception {
        if ("async".equals(mode)) {
            CountDownLatch left = new CountDownLatch(messages.size());
            for (int i = 0; i < messages.size(); i++) {
                final int n = i;
                final Message msg = messages.get(i);
                final long start = System.currentTimeMillis();
                producer.request(msg, new RequestCallback() {
                    @Override
                    public void onSuccess(Message reply) {
                        print(mode, n, msg, reply, null, start);
                        left.countDown();
                    }

                    @Override
                    public void onException(Throwable e) {
                        print(mode, n, msg, null, e, start);
                        left.countDown();
                    }
                }, timeout);
            }
            if (!left.await(timeout * 3L, TimeUnit.MILLISECONDS)) {
                Out.line("fatal", "request callbacks missing: " + left.getCount());
            }
        } else {
            for (int i = 0; i < messages.size(); i++) {
                Message msg = messages.get(i);
                long start = System.currentTimeMillis();
                try {
                    print(mode, i, msg, producer.request(msg, timeout), null, start);
                } catch (Exception e) {
                    print(mode, i, msg, null, e, start);
                }
            }
        }
    }

    private static void print(String mode, int i, Message request, Message reply, Throwable e, long start) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("mode", mode);
        m.put("i", i);
        m.put("correlationId", request.getProperty("CORRELATION_ID"));
        m.put("elapsedMs", System.currentTimeMillis() - start);
        if (reply != null) {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("topic", reply.getTopic());
            r.put("body", new String(reply.getBody(), StandardCharsets.UTF_8));
            r.put("props", new LinkedHashMap<>(reply.getProperties()));
            m.put("reply", r);
        } else {
            m.put("error", String.valueOf(e));
            m.put("errorClass", e.getClass().getSimpleName());
        }
        Out.print(m);
    }
}
