package driver;

import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * DefaultMQPullConsumer (deprecated in 4.x, still what many applications and connectors use).
 * Options: group, topic, expression, maxNums, from ({queueId: offset}: where each queue is read from;
 * default fetchConsumeOffset(mq, true)), commit (updateConsumeOffset to each queue's
 * nextBeginOffset, then persist(mq)). Per queue, pulls until NO_NEW_MSG / OFFSET_ILLEGAL
 * and prints {"queueId", "status", "nextBeginOffset", "minOffset", "maxOffset", "messages": [..]}
 * per pull; first {"queues": [..]} (fetchSubscribeMessageQueues) and
 * {"stored": {queueId: fetchConsumeOffset(mq, true)}}.
 */
final class Pull {
    private Pull() {
    }

    static void run(JSONObject opt) throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(opt.getString("group"), Options.hook(opt));
        Options.client(consumer, opt);
        String topic = opt.getString("topic");
        String expression = opt.getString("expression") == null ? "*" : opt.getString("expression");
        int maxNums = opt.containsKey("maxNums") ? opt.getIntValue("maxNums") : 32;
        consumer.start();
        Set<MessageQueue> queues = consumer.fetchSubscribeMessageQueues(topic);
        List<MessageQueue> sorted = new ArrayList<>(queues);
        sorted.sort((a, b) -> Integer.compare(a.getQueueId(), b.getQueueId()));
        List<Integer> ids = new ArrayList<>();
        Map<String, Object> stored = new LinkedHashMap<>();
        for (MessageQueue mq : sorted) {
            ids.add(mq.getQueueId());
            stored.put(String.valueOf(mq.getQueueId()), consumer.fetchConsumeOffset(mq, true));
        }
        Out.line("queues", ids);
        Out.line("stored", stored);
        JSONObject from = opt.getJSONObject("from");
        for (MessageQueue mq : sorted) {
            String q = String.valueOf(mq.getQueueId());
            long offset = from != null && from.containsKey(q) ? from.getLongValue(q) : Math.max(0, (Long) stored.get(q));
            for (int round = 0; round < 100; round++) {
                PullResult r = consumer.pull(mq, expression, offset, maxNums);
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("queueId", mq.getQueueId());
                m.put("offset", offset);
                m.put("status", r.getPullStatus().name());
                m.put("nextBeginOffset", r.getNextBeginOffset());
                m.put("minOffset", r.getMinOffset());
                m.put("maxOffset", r.getMaxOffset());
                List<Object> msgs = new ArrayList<>();
                if (r.getMsgFoundList() != null) {
                    for (MessageExt msg : r.getMsgFoundList()) {
                        msgs.add(Out.message(msg));
                    }
                }
                m.put("messages", msgs);
                Out.print(m);
                if (r.getNextBeginOffset() == offset) {
                    break;  // nothing further
                }
                offset = r.getNextBeginOffset();
                if (opt.getBooleanValue("commit")) {
                    consumer.updateConsumeOffset(mq, offset);
                }
                if (r.getPullStatus() != org.apache.rocketmq.client.consumer.PullStatus.FOUND
                    && r.getPullStatus() != org.apache.rocketmq.client.consumer.PullStatus.NO_MATCHED_MSG) {
                    break;
                }
            }
            if (opt.getBooleanValue("commit")) {
                consumer.persist(mq);  // shutdown() persists only queues it rebalanced: none here
            }
        }
        consumer.shutdown();
        Out.line("done", true);
    }
}
