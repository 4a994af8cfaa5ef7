package driver;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The MQAdmin calls an application makes through its DefaultMQProducer. Options: group, and any of
 * view (broker message ids: viewMessage(id)), viewUniq ([[topic, uniqKey]]: viewMessage(topic, id)),
 * query ([[topic, key]]: queryMessage(topic, key, 32, 0, now)), offsets ([[topic, queueId,
 * timestamp]]: minOffset, maxOffset, searchOffset, earliestMsgStoreTime). One line per call,
 * with "op" and "arg"; a message found is Out.message, a query lists them under "messages".
 */
final class Admin {
    private Admin() {
    }

    static void run(JSONObject opt) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(opt.getString("group"), Options.hook(opt));
        Options.client(producer, opt);
        producer.start();
        for (Object id : list(opt, "view")) {
            call("view", id, () -> Out.message(producer.viewMessage((String) id)));
        }
        for (Object o : list(opt, "viewUniq")) {
            JSONArray a = (JSONArray) o;
            call("viewUniq", a, () -> Out.message(producer.viewMessage(a.getString(0), a.getString(1))));
        }
        for (Object o : list(opt, "query")) {
            JSONArray a = (JSONArray) o;
            call("query", a, () -> {
                QueryResult r = producer.queryMessage(a.getString(0), a.getString(1), 32, 0, System.currentTimeMillis());
                Map<String, Object> m = new LinkedHashMap<>();
                java.util.List<Object> found = new java.util.ArrayList<>();
                for (MessageExt msg : r.getMessageList()) {
                    found.add(Out.message(msg));
                }
                m.put("messages", found);
                return m;
            });
        }
        for (Object o : list(opt, "offsets")) {
            JSONArray a = (JSONArray) o;
            MessageQueue mq = new MessageQueue(a.getString(0), opt.getString("brokerName"), a.getIntValue(1));
            call("offsets", a, () -> {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("min", producer.minOffset(mq));
                m.put("max", producer.maxOffset(mq));
                m.put("search", producer.searchOffset(mq, a.getLongValue(2)));
                m.put("earliest", producer.earliestMsgStoreTime(mq));
                return m;
            });
        }
        producer.shutdown();
        Out.line("done", true);
    }

    private interface Call {
        Map<String, Object> get() throws Exception;
    }

    private static void call(String op, Object arg, Call c) {
        Map<String, Object> m;
        try {
            m = new LinkedHashMap<>(c.get());
        } catch (Exception e) {
            m = new LinkedHashMap<>();
            m.put("error", String.valueOf(e) + (e.getCause() != null ? " / cause: " + e.getCause() : ""));
            m.put("code", e instanceof MQBrokerException ? ((MQBrokerException) e).getResponseCode()
                : e instanceof MQClientException ? ((MQClientException) e).getResponseCode() : null);
        }
        m.put("op", op);
        m.put("arg", arg);
        Out.print(m);
    }

    private static JSONArray list(JSONObject opt, String key) {
        return opt.containsKey(key) ? opt.getJSONArray(key) : new JSONArray();
    }
}
