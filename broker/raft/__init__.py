"""DLedger mode: a broker group that elects its own leader by Raft (DLedger 0.3.1.2's protocol)."""
