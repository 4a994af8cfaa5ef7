package driver;

import com.alibaba.fastjson.JSONObject;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * TransactionMQProducer. Options: group, topic, messages (each with "local": COMMIT_MESSAGE |
 * ROLLBACK_MESSAGE | UNKNOW, the local transaction's answer, and "check": the answer to the
 * broker's check-back), checkAnswer (this process's answer to every check-back, over the message's
 * "check" property), stay (keep running until stdin closes, answering check-backs).
 * Prints one line per send (SendResult plus "localState"), one {"check": ...} line per check-back,
 * then {"done": true} (or, with stay, {"closed": true}).
 */
final class Transaction {
    private Transaction() {
    }

    static void run(JSONObject opt) throws Exception {
        TransactionMQProducer producer = new TransactionMQProducer(opt.getString("group"), Options.hook(opt));
        Options.client(producer, opt);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return LocalTransactionState.valueOf(((JSONObject) arg).getString("local"));
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String answer = opt.containsKey("checkAnswer") ? opt.getString("checkAnswer") : msg.getUserProperty("check");
                LocalTransactionState state = answer == null ? LocalTransactionState.UNKNOW
                    : LocalTransactionState.valueOf(answer);
                Map<String, Object> m = Out.message(msg);
                m.put("check", state.name());
                m.put("transactionId", msg.getTransactionId());
                Out.print(m);
                return state;
            }
        });
        producer.start();
        List<Message> messages = Options.messages(opt);
        for (int i = 0; i < messages.size(); i++) {
            JSONObject spec = opt.getJSONArray("messages").getJSONObject(i);
            try {
                TransactionSendResult r = producer.sendMessageInTransaction(messages.get(i), spec);
                Map<String, Object> m = Out.sendResult(r);
                m.put("i", i);
                m.put("localState", r.getLocalTransactionState().name());
                Out.print(m);
            } catch (Exception e) {
                Produce.error(i, e);
            }
        }
        if (opt.getBooleanValue("stay")) {
            Out.line("ready", true);
            PushConsume.waitForStdinEnd();
            producer.shutdown();
            Out.line("closed", true);
        } else {
            producer.shutdown();
            Out.line("done", true);
        }
    }
}
