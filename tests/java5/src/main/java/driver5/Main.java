package driver5;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

/**
 * Drives the real Java RocketMQ 5.x client (org.apache.rocketmq:rocketmq-client-java, unmodified,
 * gRPC) through the gRPC front for tests/test_java5_client.py:
 * {@code java -cp ... driver5.Main '<json options>'}.
 *
 * <p>A JVM costs about a second to start, so one run plays a list of steps ("steps", each
 * {"do": ...}), in order, on clients it keeps by name: produce (Produce), receive (Simple:
 * SimpleConsumer), push (Push: a PushConsumer that consumes in the background until the run ends or
 * a close step), awaitPushed, close, pause (waits for a line on stdin: the test's answer, which a
 * later receive step may take its count from). Every result is one JSON line on stdout naming its
 * step; the last is {"done":true}. When each step ended and each client closed goes to stderr with
 * the time (a PushConsumer's close waits for its receive in flight). Every run is bounded by
 * "deadline" (seconds): past it the process prints {"fatal":"deadline"} and halts, so a stuck client
 * never outlives its test.
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: driver5.Main '<json options>'");
            System.exit(64);
        }
        JsonObject opt = JsonParser.parseString(args[0]).getAsJsonObject();
        armDeadline(opt.has("deadline") ? opt.get("deadline").getAsInt() : 60);
        Clients clients = new Clients(opt);
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            int i = 0;
            for (JsonElement e : opt.getAsJsonArray("steps")) {
                JsonObject step = e.getAsJsonObject();
                String what = step.get("do").getAsString();
                switch (what) {
                    case "produce":
                        Produce.run(i, step, clients);
                        break;
                    case "receive":
                        Simple.run(i, step, clients, stdin);
                        break;
                    case "push":
                        Push.start(i, step, clients);
                        break;
                    case "awaitPushed":
                        Push.await(step, clients);
                        break;
                    case "close":
                        clients.close(step.get("name").getAsString());
                        break;
                    case "pause":
                        Out.step(i, "paused", true);
                        clients.answer = stdin.readLine();
                        break;
                    default:
                        Out.line("fatal", "unknown step " + what);
                        Runtime.getRuntime().halt(64);
                }
                Out.step(i, "stepDone", what);
                System.err.println(System.currentTimeMillis() + " step " + i + " " + what + " done");
                i++;
            }
            clients.closeAll();
            System.err.println(System.currentTimeMillis() + " closed");
        } catch (Throwable e) {
            e.printStackTrace();
            Out.line("fatal", String.valueOf(e));
            Runtime.getRuntime().halt(1);
        }
        Out.line("done", true);
        // the client's non-daemon threads may linger after close(): leave without them
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
