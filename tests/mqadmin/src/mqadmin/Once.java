package mqadmin;

import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * Apache RocketMQ's mqadmin, unmodified: its own entry point (MQAdminStartup.main, what bin/mqadmin
 * runs) with the command's arguments, then the JVM's exit as soon as it returns. By then the command
 * has printed its answer and shut its client down; what the exit saves is the wait for Netty's
 * graceful shutdown of the client's event loops (a 2 s quiet period, ~3 s a command on this machine),
 * which nothing the tests read depends on. tests/helpers/mqadmin.py runs it, one JVM per command.
 */
public final class Once {
    private Once() {
    }

    public static void main(String[] args) {
        MQAdminStartup.main(args);
        System.out.flush();
        System.err.flush();
        System.exit(0);  // mqadmin exits 0 after printing its own failures too
    }
}
