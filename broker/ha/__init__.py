"""Master/slave replication as RocketMQ 4.x does it: the master's HA service streams its commit
log to each slave (HAConnection); a slave's HA client receives it and is its only writer."""
