"""A pool process in plain Python without the SDK (bench/pool.sh): hello on descriptor 4,
then one json.loads and one json.dumps per task read on descriptor 3, in one thread. Between
bench/pool_floor.c (no interpreter) and the SDK (threads, asyncio, a Context per task)."""
import json
import os
import sys

os.write(4, (json.dumps({"t": "hello", "protocol": 1, "types": [sys.argv[1] if len(sys.argv) > 1 else "noop"],
                         "inflight": int(os.environ.get("DTQ_INFLIGHT", "1")), "sdk": "pool_floor.py"})
             + "\n").encode())
buf = b""
while True:
    chunk = os.read(3, 1 << 16)
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    out = []
    for line in lines:
        msg = json.loads(line)
        if msg.get("t") == "task":
            out.append(json.dumps({"t": "ok", "id": msg["id"], "result": None}))
    if out:
        os.write(4, ("\n".join(out) + "\n").encode())
