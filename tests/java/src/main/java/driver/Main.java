package driver;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;

/**
 * Drives the real Java RocketMQ 4.x client (org.apache.rocketmq:rocketmq-client, unmodified) for
 * tests/test_java_client.py: {@code java -cp ... driver.Main <scenario> '<json options>'}.
 * Every result is one JSON line on stdout; the last is {"done":true} (one-shot scenarios) or
 * {"closed":true} (long-running ones, which stop when stdin closes).
 *
 * Scenarios: produce (Produce), consume (PushConsume), litepull (LitePull), transaction (Transaction),
 * admin (Admin: viewMessage, queryMessage, offsets), pull (Pull: DefaultMQPullConsumer),
 * request (Request: DefaultMQProducer.request, request-reply's requester).
 * Every run is bounded by the option "deadline" (seconds, default 120): past it the process prints
 * {"fatal":"deadline"} and halts, so a stuck client never outlives its test.
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: driver.Main <produce|consume|litepull|transaction|admin|pull|request> '<json options>'");
            System.exit(64);
        }
        JSONObject opt = JSON.parseObject(args[1]);
        armDeadline(opt.getIntValue("deadline") > 0 ? opt.getIntValue("deadline") : 120);
        try {
            switch (args[0]) {
                case "produce":
                    Produce.run(opt);
                    break;
                case "consume":
                    PushConsume.run(opt);
                    break;
                case "litepull":
                    LitePull.run(opt);
                    break;
                case "transaction":
                    Transaction.run(opt);
                    break;
                case "admin":
                    Admin.run(opt);
                    break;
                case "pull":
                    Pull.run(opt);
                    break;
                case "request":
                    Request.run(opt);
                    break;
                default:
                    Out.line("fatal", "unknown scenario " + args[0]);
                    Runtime.getRuntime().halt(64);
            }
        } catch (Throwable e) {
            e.printStackTrace();
            Out.line("fatal", String.valueOf(e));
            Runtime.getRuntime().halt(1);
        }
        // the client's non-daemon threads may linger after shutdown(): leave without them
        Runtime.getRuntime().halt(0);
    }

    private static void armDeadline(int seconds) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(seconds * 1000L);
            } catch (InterruptedException e) {
                return;
            }
            Out.line("fatal", "deadline");
            Runtime.getRuntime().halt(2);
        }, "driver-deadline");
        t.setDaemon(true);
        t.start();
    }
}
