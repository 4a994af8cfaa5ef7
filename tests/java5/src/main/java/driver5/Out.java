package driver5;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.apis.message.MessageView;

/** One JSON object per stdout line, whole lines only (listeners print from several threads). */
final class Out {
    private static final Gson GSON = new GsonBuilder().serializeNulls().disableHtmlEscaping().create();

    private Out() {
    }

    static synchronized void print(Map<String, Object> obj) {
        System.out.println(GSON.toJson(obj));
        System.out.flush();
    }

    static void line(String key, Object value) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put(key, value);
        print(m);
    }

    /** {"step": i, key: value}. */
    static void step(int step, String key, Object value) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("step", step);
        m.put(key, value);
        print(m);
    }

    /** What a consumer (or a transaction checker) was given, field by field. */
    static Map<String, Object> message(MessageView v) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("messageId", v.getMessageId().toString());
        m.put("topic", v.getTopic());
        ByteBuffer body = v.getBody().duplicate();
        byte[] bytes = new byte[body.remaining()];
        body.get(bytes);
        m.put("body", new String(bytes, StandardCharsets.UTF_8));
        m.put("tag", v.getTag().orElse(null));
        List<String> keys = new ArrayList<>(v.getKeys());
        Collections.sort(keys);
        m.put("keys", keys);
        m.put("messageGroup", v.getMessageGroup().orElse(null));
        m.put("deliveryTimestamp", v.getDeliveryTimestamp().orElse(null));
        m.put("properties", new TreeMap<>(v.getProperties()));
        m.put("bornHost", v.getBornHost());
        m.put("bornTimestamp", v.getBornTimestamp());
        m.put("deliveryAttempt", v.getDeliveryAttempt());
        m.put("receivedAt", System.currentTimeMillis());
        return m;
    }

    static Map<String, Object> error(Throwable e) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("error", e.getClass().getSimpleName());
        m.put("message", String.valueOf(e.getMessage()));
        return m;
    }
}
