package driver5;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.io.Closeable;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;

/** The clients of one run, kept by name across its steps, and what they share. */
final class Clients {
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    final ClientConfiguration config;
    private final Map<String, Closeable> byName = new ConcurrentHashMap<>();
    /** The line the last pause step read. */
    String answer;

    /** The front's address (opt endpoints), plaintext: the front serves TLS only when told to. */
    Clients(JsonObject opt) {
        config = ClientConfiguration.newBuilder()
            .setEndpoints(opt.get("endpoints").getAsString())
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(opt.has("requestTimeoutSeconds")
                ? opt.get("requestTimeoutSeconds").getAsInt() : 5))
            .build();
    }

    @SuppressWarnings("unchecked")
    <T extends Closeable> T get(String name) {
        return (T) byName.get(name);
    }

    void put(String name, Closeable client) {
        byName.put(name, client);
    }

    void close(String name) throws Exception {
        Closeable c = byName.remove(name);
        if (c != null) {
            c.close();
            System.err.println(System.currentTimeMillis() + " closed " + name);
        }
    }

    /** All at once: a PushConsumer's close waits for its receive in flight. */
    void closeAll() throws Exception {
        List<Thread> closing = new ArrayList<>();
        List<Exception> failed = new CopyOnWriteArrayList<>();
        for (String name : byName.keySet().toArray(new String[0])) {
            Thread t = new Thread(() -> {
                try {
                    close(name);
                } catch (Exception e) {
                    failed.add(e);
                }
            }, "close-" + name);
            t.start();
            closing.add(t);
        }
        for (Thread t : closing) {
            t.join();
        }
        if (!failed.isEmpty()) {
            throw failed.get(0);
        }
    }

    static String str(JsonObject o, String key, String otherwise) {
        return o.has(key) && !o.get(key).isJsonNull() ? o.get(key).getAsString() : otherwise;
    }

    static int integer(JsonObject o, String key, int otherwise) {
        return o.has(key) ? o.get(key).getAsInt() : otherwise;
    }

    /** {topic: tag expression} of a consumer step: opt topic and expression ("*" by default). */
    static Map<String, FilterExpression> subscription(JsonObject step) {
        return Map.of(step.get("topic").getAsString(),
            new FilterExpression(str(step, "expression", "*"), FilterExpressionType.TAG));
    }

    /**
     * {body, tag, keys:[..], props:{}, group (message group), delayMs (delivery timestamp that far
     * ahead), deliveryAt (epoch ms)} as a Message of `topic`.
     */
    static Message message(String topic, JsonObject m) {
        MessageBuilder b = PROVIDER.newMessageBuilder().setTopic(topic)
            .setBody(m.get("body").getAsString().getBytes(StandardCharsets.UTF_8));
        if (m.has("tag")) {
            b.setTag(m.get("tag").getAsString());
        }
        if (m.has("keys")) {
            JsonArray keys = m.getAsJsonArray("keys");
            String[] k = new String[keys.size()];
            for (int i = 0; i < k.length; i++) {
                k[i] = keys.get(i).getAsString();
            }
            b.setKeys(k);
        }
        if (m.has("props")) {
            for (Map.Entry<String, JsonElement> e : m.getAsJsonObject("props").entrySet()) {
                b.addProperty(e.getKey(), e.getValue().getAsString());
            }
        }
        if (m.has("group")) {
            b.setMessageGroup(m.get("group").getAsString());
        }
        if (m.has("delayMs")) {
            b.setDeliveryTimestamp(System.currentTimeMillis() + m.get("delayMs").getAsLong());
        }
        if (m.has("deliveryAt")) {
            b.setDeliveryTimestamp(m.get("deliveryAt").getAsLong());
        }
        return b.build();
    }
}
