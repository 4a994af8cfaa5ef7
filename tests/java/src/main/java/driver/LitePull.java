package driver;

import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * DefaultLitePullConsumer. Options: group, topic, expression, assign (list of queue ids: assign()
 * instead of subscribe()), seek ({queueId: offset}, after start), expect (messages to poll before
 * stopping), autoCommit (default true), commit (commitSync() before stopping), consumeFromWhere.
 * Prints {"started": ms} once started, {"queues": [..]} (fetchMessageQueues), one line per polled message, then
 * {"committed": {queueId: offset}} for the topic's queues and {"done": true}.
 */
final class LitePull {
    private LitePull() {
    }

    static void run(JSONObject opt) throws Exception {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(opt.getString("group"), Options.hook(opt));
        Options.client(consumer, opt);
        String topic = opt.getString("topic");
        String expression = opt.getString("expression") == null ? "*" : opt.getString("expression");
        consumer.setAutoCommit(!opt.containsKey("autoCommit") || opt.getBooleanValue("autoCommit"));
        consumer.setPollTimeoutMillis(1000);
        if (opt.containsKey("consumeFromWhere")) {
            consumer.setConsumeFromWhere(ConsumeFromWhere.valueOf(opt.getString("consumeFromWhere")));
        }
        List<Integer> assign = opt.containsKey("assign") ? opt.getJSONArray("assign").toJavaList(Integer.class) : null;
        if (assign == null) {
            consumer.subscribe(topic, expression);
        } else {
            consumer.setSubExpressionForAssign(topic, expression);
        }
        consumer.start();
        Out.line("started", System.currentTimeMillis());
        Collection<MessageQueue> queues = consumer.fetchMessageQueues(topic);
        List<Integer> ids = new ArrayList<>();
        for (MessageQueue mq : queues) {
            ids.add(mq.getQueueId());
        }
        ids.sort(null);
        Out.line("queues", ids);
        if (assign != null) {
            List<MessageQueue> mine = new ArrayList<>();
            for (MessageQueue mq : queues) {
                if (assign.contains(mq.getQueueId())) {
                    mine.add(mq);
                }
            }
            consumer.assign(mine);
        }
        JSONObject seek = opt.getJSONObject("seek");
        if (seek != null) {
            for (MessageQueue mq : queues) {
                if (seek.containsKey(String.valueOf(mq.getQueueId()))) {
                    consumer.seek(mq, seek.getLongValue(String.valueOf(mq.getQueueId())));
                }
            }
        }
        int expect = opt.getIntValue("expect");
        int got = 0;
        long until = System.currentTimeMillis() + opt.getLongValue("pollSeconds") * 1000;
        while (got < expect || System.currentTimeMillis() < until) {
            List<MessageExt> msgs = consumer.poll();
            for (MessageExt msg : msgs) {
                Out.print(Out.message(msg));
            }
            got += msgs.size();
        }
        if (opt.getBooleanValue("commit")) {
            consumer.commitSync();
        }
        Map<String, Object> committed = new LinkedHashMap<>();
        for (MessageQueue mq : queues) {
            committed.put(String.valueOf(mq.getQueueId()), consumer.committed(mq));
        }
        Out.line("committed", committed);
        consumer.shutdown();
        Out.line("done", true);
    }
}
