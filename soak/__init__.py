"""The soak (issue 34 §4): two broker groups, one DLedger (three members) and one master/slave,
and their name server under a steady, throttled load from the project's client and the real
RocketMQ clients, with a fault every SOAK_FAULT_EVERY seconds, for SOAK_HOURS hours.

    python -m soak            # or `make soak` (SOAK_HOURS=24 by default)

One concern per module: cluster.py starts the processes, load.py is the project's throttled
producer, clients.py the real clients' rounds, faults.py the rotation of faults, sampler.py the
/proc samples, check.py the history check after the drain, trend.py the fits of memory, report.py
the files written, plot.py the figures and rejudge.py the memory verdict again from a run's samples."""
