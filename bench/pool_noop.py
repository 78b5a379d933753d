"""The Python no-op of bench/pool.sh and of the peer sitting (docs/BENCHMARKS.md, "Handler
pools"). In a pool: `command = /usr/bin/python3 -m dtq serve pool_noop` with sdk/python and
this folder on PYTHONPATH. As an exec handler (`exec = /usr/bin/python3 .../pool_noop.py`,
sdk/python on PYTHONPATH): the same function, run once on the payload read from stdin."""
import json
import sys

import dtq


@dtq.task
def noop(payload):
    return None


if __name__ == "__main__":
    print(json.dumps(noop(json.load(sys.stdin))))
