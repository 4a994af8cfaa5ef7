package driver5;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import java.io.BufferedReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * A SimpleConsumer's receives: {"step", "received": message, "action": ...} per message, then what
 * the action did ({"step", "acked" | "changed": messageId} or {"step", "failed": ..}).
 * Step options: name ("simple"; the consumer is kept for later steps), group, topic, expression,
 * count (the step ends once so many came, or the first empty receive when "count" is 0; "answer":
 * the number a pause step read),
 * maxEmpty (empty receives tolerated before the step gives up; 3), batch (1..32), invisibleMs
 * (30 s), awaitMs (the long polling time; 2 s), ackFirst n (ack only the first n, leave the rest
 * unacked; all by default), actions {body: [action of attempt 1, of attempt 2, ...]} (ack by
 * default): ack, leave (neither acked nor changed), nack (changeInvisibleDuration 0: visible again at
 * once), extend (changeInvisibleDuration to 20 s, then ack with the handle that gave), pauseAfter n
 * (after n messages print {"step","paused"} and wait for a line on stdin).
 */
final class Simple {
    private Simple() {
    }

    static void run(int step, JsonObject opt, Clients clients, BufferedReader stdin) throws Exception {
        String name = Clients.str(opt, "name", "simple");
        SimpleConsumer consumer = clients.get(name);
        if (consumer == null) {
            consumer = Clients.PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(clients.config)
                .setConsumerGroup(opt.get("group").getAsString())
                .setSubscriptionExpressions(Clients.subscription(opt))
                .setAwaitDuration(Duration.ofMillis(Clients.integer(opt, "awaitMs", 2000)))
                .build();
            clients.put(name, consumer);
        }
        int count = opt.has("count") && "answer".equals(opt.get("count").getAsString())
            ? Integer.parseInt(clients.answer.trim()) : Clients.integer(opt, "count", 0);
        int maxEmpty = Clients.integer(opt, "maxEmpty", 3);
        int ackFirst = Clients.integer(opt, "ackFirst", Integer.MAX_VALUE);
        int pauseAfter = Clients.integer(opt, "pauseAfter", -1);
        Duration invisible = Duration.ofMillis(Clients.integer(opt, "invisibleMs", 30_000));
        int got = 0;
        int empty = 0;
        while (count == 0 || got < count) {
            List<MessageView> views;
            try {
                views = consumer.receive(Clients.integer(opt, "batch", 16), invisible);
            } catch (Exception e) {
                Out.step(step, "receiveFailed", Out.error(e));
                views = List.of();
            }
            if (views.isEmpty()) {
                if (count == 0 || ++empty >= maxEmpty) {
                    break;
                }
                continue;
            }
            for (MessageView v : views) {
                String action = action(opt, v, got < ackFirst);
                Map<String, Object> m = Out.message(v);
                Out.step(step, "received", m);
                got++;
                String id = v.getMessageId().toString();
                try {
                    if ("nack".equals(action)) {
                        consumer.changeInvisibleDuration(v, Duration.ZERO);
                        Out.step(step, "changed", id);
                    } else if ("extend".equals(action)) {
                        consumer.changeInvisibleDuration(v, Duration.ofSeconds(20));
                        Out.step(step, "changed", id);
                    }
                    if ("ack".equals(action) || "extend".equals(action)) {
                        consumer.ack(v);
                        Out.step(step, "acked", id);
                    }
                } catch (Exception e) {
                    Map<String, Object> f = Out.error(e);
                    f.put("messageId", id);
                    Out.step(step, "failed", f);
                }
                if (got == pauseAfter) {
                    Out.step(step, "paused", got);
                    stdin.readLine();
                }
            }
        }
    }

    /** What to do with `v`: its body's action for its attempt in opt actions, else ack (or leave). */
    private static String action(JsonObject opt, MessageView v, boolean ackByOrder) {
        if (!ackByOrder) {
            return "leave";
        }
        if (opt.has("actions")) {
            ByteBuffer b = v.getBody().duplicate();
            byte[] bytes = new byte[b.remaining()];
            b.get(bytes);
            JsonArray plan = opt.getAsJsonObject("actions").getAsJsonArray(new String(bytes, StandardCharsets.UTF_8));
            if (plan != null && v.getDeliveryAttempt() <= plan.size()) {
                return plan.get(v.getDeliveryAttempt() - 1).getAsString();
            }
        }
        return "ack";
    }
}
