package driver5;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * A Producer's sends, one {"step", "sent": {index, messageId} | {index, error, message}} line each.
 * Step options: name (the producer, kept for later steps; "producer"), topic, messages [{..., transaction:
 * commit | rollback | unknown (the transaction left open for the broker's check)}], mode sync | async,
 * checker COMMIT | ROLLBACK | UNKNOWN (a transactional producer whose TransactionChecker prints
 * {"step", "checked": message} and answers that), awaitChecks n (the step ends once n checks came).
 */
final class Produce {
    private Produce() {
    }

    static void run(int step, JsonObject opt, Clients clients) throws Exception {
        String name = Clients.str(opt, "name", "producer");
        String topic = opt.get("topic").getAsString();
        Producer producer = clients.get(name);
        Semaphore checks = new Semaphore(0);
        if (producer == null) {
            ProducerBuilder b = Clients.PROVIDER.newProducerBuilder().setClientConfiguration(clients.config)
                .setTopics(topic);
            if (opt.has("checker")) {
                TransactionResolution answer = TransactionResolution.valueOf(opt.get("checker").getAsString());
                b.setTransactionChecker(view -> {
                    Out.step(step, "checked", Out.message(view));
                    checks.release();
                    return answer;
                });
            }
            producer = b.build();
            clients.put(name, producer);
        }
        boolean async = "async".equals(Clients.str(opt, "mode", "sync"));
        CompletableFuture<?>[] pending = new CompletableFuture<?>[opt.getAsJsonArray("messages").size()];
        int i = 0;
        for (JsonElement e : opt.getAsJsonArray("messages")) {
            JsonObject m = e.getAsJsonObject();
            Message msg = Clients.message(topic, m);
            int index = i++;
            if (async) {
                pending[index] = producer.sendAsync(msg).whenComplete((r, t) -> sent(step, index, msg, r, t));
                continue;
            }
            try {
                String tx = Clients.str(m, "transaction", null);
                if (tx == null) {
                    sent(step, index, msg, producer.send(msg), null);
                    continue;
                }
                Transaction transaction = producer.beginTransaction();
                SendReceipt r = producer.send(msg, transaction);
                sent(step, index, msg, r, null);
                if ("commit".equals(tx)) {
                    transaction.commit();
                } else if ("rollback".equals(tx)) {
                    transaction.rollback();
                }
            } catch (Exception ex) {
                sent(step, index, msg, null, ex);
            }
        }
        for (CompletableFuture<?> f : pending) {
            if (f != null) {
                try {
                    f.join();
                } catch (Exception ignored) {
                    // printed by whenComplete
                }
            }
        }
        int awaited = Clients.integer(opt, "awaitChecks", 0);
        if (awaited > 0 && !checks.tryAcquire(awaited, 50, TimeUnit.SECONDS)) {
            throw new IllegalStateException("fewer than " + awaited + " transaction checks");
        }
    }

    private static void sent(int step, int index, Message msg, SendReceipt r, Throwable t) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("index", index);
        m.put("deliveryTimestamp", msg.getDeliveryTimestamp().orElse(null));
        if (t == null) {
            m.put("messageId", r.getMessageId().toString());
        } else {
            m.putAll(Out.error(t));
        }
        Out.step(step, "sent", m);
    }
}
