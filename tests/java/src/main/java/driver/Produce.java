package driver;

import com.alibaba.fastjson.JSONObject;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * DefaultMQProducer. Options: group, topic, messages, mode (sync | async | oneway | batch | orderly),
 * timeout (ms), compressOver (compressMsgBodyOverHowmuch), retries (retryTimesWhenSendFailed),
 * accessKey/secretKey (AclClientRPCHook), trace (enableMsgTrace: traces to RMQ_SYS_TRACE_TOPIC), stay (print {"ready":true} after the sends
 * and keep the producer until stdin closes, then {"closed":true}), pauseAfter (sync: print
 * {"paused": n} before message n and wait for a line on stdin).
 * One line per message: its SendResult, or {"error", "code"}; oneway lines carry only "i";
 * a batch prints one line for the whole batch. orderly picks the queue with a MessageQueueSelector:
 * the message's "orderKey" (an int) modulo the queue count.
 */
final class Produce {
    private Produce() {
    }

    static void run(JSONObject opt) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(opt.getString("group"), Options.hook(opt),
            opt.getBooleanValue("trace"), null);
        Options.client(producer, opt);
        if (opt.containsKey("compressOver")) {
            producer.setCompressMsgBodyOverHowmuch(opt.getIntValue("compressOver"));
        }
        if (opt.containsKey("retries")) {
            producer.setRetryTimesWhenSendFailed(opt.getIntValue("retries"));
        }
        int timeout = opt.containsKey("timeout") ? opt.getIntValue("timeout") : 5000;
        producer.setSendMsgTimeout(timeout);
        producer.start();
        List<Message> messages = Options.messages(opt);
        String mode = opt.getString("mode") == null ? "sync" : opt.getString("mode");
        switch (mode) {
            case "sync":
                for (int i = 0; i < messages.size(); i++) {
                    if (opt.containsKey("pauseAfter") && i == opt.getIntValue("pauseAfter")) {
                        Out.line("paused", i);  // until a line on stdin: the test changes the world meanwhile
                        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
                    }
                    try {
                        print(i, producer.send(messages.get(i), timeout));
                    } catch (Exception e) {
                        error(i, e);
                    }
                }
                break;
            case "async":
                async(producer, messages, timeout);
                break;
            case "oneway":
                for (int i = 0; i < messages.size(); i++) {
                    producer.sendOneway(messages.get(i));
                    Out.print(Map.of("i", i));
                }
                break;
            case "batch":
                try {
                    print(0, producer.send(messages, timeout));
                } catch (Exception e) {
                    error(0, e);
                }
                break;
            case "orderly":
                for (int i = 0; i < messages.size(); i++) {
                    int key = opt.getJSONArray("messages").getJSONObject(i).getIntValue("orderKey");
                    try {
                        print(i, producer.send(messages.get(i), (List<MessageQueue> mqs, Message msg, Object arg) ->
                            mqs.get((Integer) arg % mqs.size()), key, timeout));
                    } catch (Exception e) {
                        error(i, e);
                    }
                }
                break;
            default:
                throw new IllegalArgumentException("mode " + mode);
        }
        if (opt.getBooleanValue("stay")) {  // alive until stdin closes (its traces are sent meanwhile)
            Out.line("ready", true);
            PushConsume.waitForStdinEnd();
            producer.shutdown();
            Out.line("closed", true);
        } else {
            producer.shutdown();
            Out.line("done", true);
        }
    }

    private static void async(DefaultMQProducer producer, List<Message> messages, int timeout) throws Exception {
        CountDownLatch left = new CountDownLatch(messages.size());
        for (int i = 0; i < messages.size(); i++) {
            final int n = i;
            producer.send(messages.get(i), new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    Map<String, Object> m = Out.sendResult(r);
                    m.put("i", n);
                    m.put("async", true);
                    Out.print(m);
                    left.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    error(n, e);
                    left.countDown();
                }
            }, timeout);
        }
        if (!left.await(timeout * 2L, TimeUnit.MILLISECONDS)) {
            Out.line("fatal", "async callbacks missing: " + left.getCount());
        }
    }

    private static void print(int i, SendResult r) {
        Map<String, Object> m = Out.sendResult(r);
        m.put("i", i);
        Out.print(m);
    }

    static void error(int i, Throwable e) {
        Map<String, Object> m = new java.util.LinkedHashMap<>();
        m.put("i", i);
        m.put("error", String.valueOf(e));
        if (e instanceof MQBrokerException) {
            m.put("code", ((MQBrokerException) e).getResponseCode());
        } else if (e instanceof MQClientException) {
            m.put("code", ((MQClientException) e).getResponseCode());
        } else {
            m.put("code", null);
        }
        Out.print(m);
    }
}
