#!/usr/bin/python3
# The Python no-op as an exec handler without the SDK (bench/pool.sh's py-exec; the same as
# the peer harness's handlers/noop.py): reads the payload, prints null.
import json, sys
json.load(sys.stdin)
print("null")
