package driver;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/** One JSON object per stdout line, whole lines only (callbacks print from several threads). */
final class Out {
    private Out() {
    }

    static synchronized void print(Map<String, Object> obj) {
        System.out.println(JSON.toJSONString(obj, SerializerFeature.WriteMapNullValue));
        System.out.flush();
    }

    static void line(String key, Object value) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put(key, value);
        print(m);
    }

    static Map<String, Object> sendResult(SendResult r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("status", r.getSendStatus().name());
        m.put("msgId", r.getMsgId());
        m.put("offsetMsgId", r.getOffsetMsgId());
        m.put("topic", r.getMessageQueue().getTopic());
        m.put("brokerName", r.getMessageQueue().getBrokerName());
        m.put("queueId", r.getMessageQueue().getQueueId());
        m.put("queueOffset", r.getQueueOffset());
        m.put("transactionId", r.getTransactionId());
        return m;
    }

    /** A received message, field by field; bodies over 256 bytes are reported by size and content check. */
    static Map<String, Object> message(MessageExt msg) {
        Map<String, Object> m = new LinkedHashMap<>();
        byte[] body = msg.getBody();
        m.put("topic", msg.getTopic());
        m.put("tags", msg.getTags());
        m.put("keys", msg.getKeys());
        Map<String, String> user = new LinkedHashMap<>(msg.getProperties());
        m.put("props", user);
        m.put("body", body.length > 256 ? null : new String(body, StandardCharsets.UTF_8));
        m.put("size", body.length);
        m.put("bodyIsX", body.length > 256 ? allX(body) : null);
        m.put("reconsumeTimes", msg.getReconsumeTimes());
        m.put("msgId", msg.getMsgId());
        m.put("uniqKey", msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        m.put("offsetMsgId", msgIdOf(msg));
        m.put("queueId", msg.getQueueId());
        m.put("queueOffset", msg.getQueueOffset());
        m.put("commitLogOffset", msg.getCommitLogOffset());
        m.put("sysFlag", msg.getSysFlag());
        m.put("bornTimestamp", msg.getBornTimestamp());
        m.put("storeTimestamp", msg.getStoreTimestamp());
        m.put("brokerName", msg.getBrokerName());
        m.put("delayLevel", msg.getDelayTimeLevel());
        m.put("thread", Thread.currentThread().getName());
        m.put("receivedAt", System.currentTimeMillis());
        return m;
    }

    private static String msgIdOf(MessageExt msg) {
        try {
            return (String) msg.getClass().getMethod("getOffsetMsgId").invoke(msg);
        } catch (ReflectiveOperationException e) {
            return msg.getMsgId();
        }
    }

    private static boolean allX(byte[] body) {
        for (byte b : body) {
            if (b != 'x') {
                return false;
            }
        }
        return true;
    }
}
