"""Helpers of the crash, supervision and corruption tests: child processes in their own process
group, bounded waits for conditions, and the self-describing message bodies the crash writer puts."""
