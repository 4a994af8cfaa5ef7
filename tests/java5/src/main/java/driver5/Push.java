package driver5;

import com.google.gson.JsonObject;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;

/**
 * A PushConsumer consuming in the background: its listener prints {"step", "pushed": message,
 * "result": SUCCESS | FAILURE} per delivery. Step options: name ("push"), group, topic, expression,
 * failUntil n (the listener fails a message's attempts up to n, -1: always; 0 by default), fail
 * {body: n} (failUntil for that body), threads.
 * awaitPushed {name, count, seconds} waits until the consumer saw so many deliveries.
 */
final class Push {
    private static final Map<String, Semaphore> DELIVERIES = new ConcurrentHashMap<>();

    private Push() {
    }

    static void start(int step, JsonObject opt, Clients clients) throws Exception {
        String name = Clients.str(opt, "name", "push");
        int failUntil = Clients.integer(opt, "failUntil", 0);
        Semaphore seen = new Semaphore(0);
        DELIVERIES.put(name, seen);
        PushConsumer consumer = Clients.PROVIDER.newPushConsumerBuilder().setClientConfiguration(clients.config)
            .setConsumerGroup(opt.get("group").getAsString())
            .setSubscriptionExpressions(Clients.subscription(opt))
            .setConsumptionThreadCount(Clients.integer(opt, "threads", 4))
            .setMessageListener(view -> {
                Map<String, Object> m = Out.message(view);
                int until = opt.has("fail") && opt.getAsJsonObject("fail").has((String) m.get("body"))
                    ? opt.getAsJsonObject("fail").get((String) m.get("body")).getAsInt() : failUntil;
                boolean fail = until < 0 || view.getDeliveryAttempt() <= until;
                ConsumeResult result = fail ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
                m.put("result", result.name());
                Out.step(step, "pushed", m);
                seen.release();
                return result;
            })
            .build();
        clients.put(name, consumer);
    }

    static void await(JsonObject opt, Clients clients) throws Exception {
        String name = Clients.str(opt, "name", "push");
        int count = opt.get("count").getAsInt();
        if (!DELIVERIES.get(name).tryAcquire(count, Clients.integer(opt, "seconds", 30), TimeUnit.SECONDS)) {
            throw new IllegalStateException("fewer than " + count + " deliveries to " + name);
        }
    }
}
