"""Pure-Python twins of the Cython kernels, for the tests only (the broker never imports these).

Each twin is written from the RocketMQ reference (/work/shared/reference/rocketmq-store.md), not
from the kernel it checks, so that "kernel == twin" compares two independent readings of the spec.
"""
