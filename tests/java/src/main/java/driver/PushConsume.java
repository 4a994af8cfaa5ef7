package driver;

import com.alibaba.fastjson.JSONObject;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

/**
 * DefaultMQPushConsumer, until stdin closes: then shutdown() (which persists offsets) and
 * {"closed":true}. Options: group, topic, expression ("*") or sql (MessageSelector.bySql), model (CLUSTERING | BROADCASTING),
 * orderly (MessageListenerOrderly), fail ("once": RECONSUME_LATER / SUSPEND on a message's first
 * delivery, "always"), maxReconsumeTimes, consumeFromWhere, consumeTimestamp, suspendMillis,
 * trace (enableMsgTrace), accessKey/secretKey (AclClientRPCHook), reply (request-reply's responder:
 * each message answered with MessageUtil.createReplyMessage, body "reply-" + its body, sent by a
 * DefaultMQProducer of group "reply" + the consumer group).
 * One line per delivery (Out.message, plus "failing"; a responder's also "replied": the reply's
 * SendResult status, or "replyError").
 */
final class PushConsume {
    private PushConsume() {
    }

    static void run(JSONObject opt) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(opt.getString("group"), Options.hook(opt),
            new AllocateMessageQueueAveragely(), opt.getBooleanValue("trace"), null);
        Options.client(consumer, opt);
        if (opt.containsKey("sql")) {
            consumer.subscribe(opt.getString("topic"), MessageSelector.bySql(opt.getString("sql")));
        } else {
            consumer.subscribe(opt.getString("topic"), opt.getString("expression") == null ? "*" : opt.getString("expression"));
        }
        if (opt.containsKey("model")) {
            consumer.setMessageModel(MessageModel.valueOf(opt.getString("model")));
        }
        if (opt.containsKey("maxReconsumeTimes")) {
            consumer.setMaxReconsumeTimes(opt.getIntValue("maxReconsumeTimes"));
        }
        if (opt.containsKey("consumeFromWhere")) {
            consumer.setConsumeFromWhere(ConsumeFromWhere.valueOf(opt.getString("consumeFromWhere")));
        }
        if (opt.containsKey("consumeTimestamp")) {
            consumer.setConsumeTimestamp(opt.getString("consumeTimestamp"));
        }
        if (opt.containsKey("suspendMillis")) {
            consumer.setSuspendCurrentQueueTimeMillis(opt.getLongValue("suspendMillis"));
        }
        // shutdown() waits for the listeners at work, so that what they finished is committed
        consumer.setAwaitTerminationMillisWhenShutdown(5000);
        String fail = opt.getString("fail");
        DefaultMQProducer replier = null;
        if (opt.getBooleanValue("reply")) {
            replier = new DefaultMQProducer("reply" + opt.getString("group"));
            Options.client(replier, opt);
            replier.start();
        }
        final DefaultMQProducer responder = replier;
        if (opt.getBooleanValue("orderly")) {
            consumer.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                boolean failing = deliver(msgs, fail);
                return failing ? ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT : ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                if (responder != null) {
                    reply(responder, msgs);
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                }
                boolean failing = deliver(msgs, fail);
                return failing ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        consumer.start();
        Out.line("ready", true);
        waitForStdinEnd();
        consumer.shutdown();
        if (responder != null) {
            responder.shutdown();
        }
        Out.line("closed", true);
    }

    /** Each request answered: MessageUtil.createReplyMessage (it needs the broker's CLUSTER), then send. */
    private static void reply(DefaultMQProducer responder, List<MessageExt> msgs) {
        for (MessageExt msg : msgs) {
            Map<String, Object> m = Out.message(msg);
            try {
                Message reply = MessageUtil.createReplyMessage(msg,
                    ("reply-" + new String(msg.getBody(), StandardCharsets.UTF_8)).getBytes(StandardCharsets.UTF_8));
                m.put("replied", responder.send(reply, 5000).getSendStatus().name());
            } catch (Exception e) {
                m.put("replyError", String.valueOf(e));
            }
            Out.print(m);
        }
    }

    /** Prints each message; whether the batch fails this time. */
    private static boolean deliver(List<MessageExt> msgs, String fail) {
        boolean failing = false;
        for (MessageExt msg : msgs) {
            boolean f = "always".equals(fail) || ("once".equals(fail) && msg.getReconsumeTimes() == 0);
            Map<String, Object> m = Out.message(msg);
            m.put("failing", f);
            Out.print(m);
            failing |= f;
        }
        return failing;
    }

    static void waitForStdinEnd() throws java.io.IOException {
        InputStream in = System.in;
        byte[] buf = new byte[256];
        while (in.read(buf) >= 0) {
            // nothing to read: the test closes stdin to stop us
        }
    }
}
