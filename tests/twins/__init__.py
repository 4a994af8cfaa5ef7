"""Pure-Python twins of the Cython kernels, for the tests only (the broker never imports these).

Each twin is written from docs/formats.md (RocketMQ 4.x's formats, citing the RocketMQ source
files they come from), not from the kernel it checks, so that "kernel == twin" compares two
independent readings of the spec.
"""
