package driver;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.common.message.Message;

/** What every scenario shares: the client's addresses and the messages a test asks for. */
final class Options {
    private Options() {
    }

    /** The name server is always explicit (without it the client polls an HTTP address server). */
    static void client(ClientConfig c, JSONObject opt) {
        c.setNamesrvAddr(opt.getString("nameSrv"));
        c.setVipChannelEnabled(opt.getBooleanValue("vip"));
        c.setInstanceName(opt.containsKey("instanceName") ? opt.getString("instanceName")
            : "java-" + ProcessHandle.current().pid());
        if (opt.containsKey("namespace")) {
            c.setNamespace(opt.getString("namespace"));
        }
        if (opt.containsKey("pollNameServerInterval")) {
            c.setPollNameServerInterval(opt.getIntValue("pollNameServerInterval"));
        }
        if (opt.containsKey("heartbeatBrokerInterval")) {
            c.setHeartbeatBrokerInterval(opt.getIntValue("heartbeatBrokerInterval"));
        }
        if (opt.containsKey("persistConsumerOffsetInterval")) {
            c.setPersistConsumerOffsetInterval(opt.getIntValue("persistConsumerOffsetInterval"));
        }
    }

    /** AclClientRPCHook signing with opt accessKey / secretKey; null (no signing) without them. */
    static RPCHook hook(JSONObject opt) {
        if (!opt.containsKey("accessKey")) {
            return null;
        }
        return new AclClientRPCHook(new SessionCredentials(opt.getString("accessKey"), opt.getString("secretKey")));
    }

    /** {tags, keys:[..], props:{}, body (UTF-8) | size (bytes of 'x'), delayLevel, waitStoreMsgOK} as a Message. */
    static Message message(String topic, JSONObject m) {
        byte[] body = m.containsKey("size") ? repeatX(m.getIntValue("size"))
            : m.getString("body").getBytes(StandardCharsets.UTF_8);
        Message msg = new Message(topic, m.getString("tags"), body);
        JSONArray keys = m.getJSONArray("keys");
        if (keys != null) {
            msg.setKeys(keys.toJavaList(String.class));
        }
        JSONObject props = m.getJSONObject("props");
        if (props != null) {
            for (Map.Entry<String, Object> e : props.entrySet()) {
                msg.putUserProperty(e.getKey(), String.valueOf(e.getValue()));
            }
        }
        if (m.containsKey("waitStoreMsgOK")) {  // the WAIT property
            msg.setWaitStoreMsgOK(m.getBooleanValue("waitStoreMsgOK"));
        }
        if (m.containsKey("delayLevel")) {
            msg.setDelayTimeLevel(m.getIntValue("delayLevel"));
        }
        return msg;
    }

    /** opt messages, or (too many for a command line) "count" copies of "template", body "<body>-<i>". */
    static List<Message> messages(JSONObject opt) {
        List<Message> out = new ArrayList<>();
        if (opt.containsKey("count")) {
            for (int i = 0; i < opt.getIntValue("count"); i++) {
                JSONObject m = (JSONObject) opt.getJSONObject("template").clone();
                m.put("body", m.getString("body") + "-" + i);
                out.add(message(opt.getString("topic"), m));
            }
            return out;
        }
        for (Object o : opt.getJSONArray("messages")) {
            out.add(message(opt.getString("topic"), (JSONObject) o));
        }
        return out;
    }

    private static byte[] repeatX(int n) {
        byte[] b = new byte[n];
        Arrays.fill(b, (byte) 'x');
        return b;
    }
}
