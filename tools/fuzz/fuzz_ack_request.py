"""atheris harness: the ack_request check of tools/fuzz/checks.py on fuzzer input (see harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tools.fuzz.harness import main  # noqa: E402

if __name__ == "__main__":
    main("ack_request")
