#!/usr/bin/python3
"""Checks contrib/prometheus/dtq-alerts.yml without Prometheus: the file is YAML in the
shape of a Prometheus rule file (groups of named rules, each alert with expr, a `for`
duration, a severity and a summary; no unknown keys), every expression's brackets balance,
and every dtq_ series an expression names is one dtq-web's or the daemon's /metrics
exports (the names written in src/web_metrics.c, src/http.c and src/metrics.c; a histogram
adds _bucket, _sum and _count). With promtool on the PATH (Debian's prometheus package),
`promtool check rules` runs too. Usage: alert_rules.py <source dir>."""
import os
import re
import shutil
import subprocess
import sys

import yaml

src = sys.argv[1]
path = os.path.join(src, "contrib", "prometheus", "dtq-alerts.yml")
failures = []


def fail(msg):
    failures.append(msg)


exported = set()
for name in ("web_metrics.c", "http.c", "metrics.c"):
    with open(os.path.join(src, "src", name)) as f:
        text = f.read()
    for m in re.finditer(r'"(dtq_[a-z_]+)"', text):
        exported.add(m.group(1))
        if "histogram" in text[m.start() - 40:m.start()]:
            for suffix in ("_bucket", "_sum", "_count"):
                exported.add(m.group(1) + suffix)
# sanity: the names the issue promises are among them
for must in ("dtq_queue_depth", "dtq_dead_letters", "dtq_workers", "dtq_scheduler_leader",
             "dtq_redis_connected", "dtq_task_wait_seconds_bucket"):
    if must not in exported:
        fail("the export scan missed %s: the check itself is broken" % must)

with open(path) as f:
    doc = yaml.safe_load(f)
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
if not isinstance(doc, dict) or set(doc) != {"groups"}:
    fail("the file must hold `groups` alone")
alerts = set()
for g in doc.get("groups") or []:
    if not isinstance(g.get("name"), str) or not g.get("rules"):
        fail("a group without a name or rules: %r" % g)
    for key in g:
        if key not in ("name", "interval", "rules", "limit"):
            fail("group %s: unknown key %s" % (g.get("name"), key))
    for r in g.get("rules") or []:
        name = r.get("alert") or r.get("record")
        if not name or bool(r.get("alert")) == bool(r.get("record")):
            fail("a rule needs alert or record, not both: %r" % r)
            continue
        for key in r:
            if key not in ("alert", "record", "expr", "for", "keep_firing_for", "labels",
                           "annotations"):
                fail("%s: unknown key %s" % (name, key))
        if name in alerts:
            fail("%s: twice" % name)
        alerts.add(name)
        expr = r.get("expr")
        if not isinstance(expr, str) or not expr.strip():
            fail("%s: no expr" % name)
            continue
        depth = {"(": 0, "[": 0, "{": 0}
        pairs = {")": "(", "]": "[", "}": "{"}
        for ch in re.sub(r'"[^"]*"', '""', expr):
            if ch in depth:
                depth[ch] += 1
            elif ch in pairs:
                depth[pairs[ch]] -= 1
                if depth[pairs[ch]] < 0:
                    fail("%s: unbalanced %s in %s" % (name, ch, expr))
        if any(depth.values()):
            fail("%s: unbalanced brackets in %s" % (name, expr))
        named = set(re.findall(r"\b(dtq_[a-z_]+)\b(?!\s*\()", re.sub(r'"[^"]*"', '""', expr)))
        # a rule on the scrape itself names Prometheus' own `up` instead
        if not named and not re.search(r"\bup\b", expr):
            fail("%s: names no dtq_ series (nor up)" % name)
        for m in named - exported:
            fail("%s: %s is not exported by dtq-web or dtq-worker" % (name, m))
        if "alert" in r:
            if "for" in r and not DURATION.match(str(r["for"])):
                fail("%s: for %r is not a duration" % (name, r["for"]))
            if (r.get("labels") or {}).get("severity") not in ("critical", "warning", "info"):
                fail("%s: no severity label" % name)
            if not (r.get("annotations") or {}).get("summary"):
                fail("%s: no summary" % name)
for want in ("DtqDeadLettersGrowing", "DtqOldestWaitingTaskTooOld", "DtqNoWorkerAlive",
             "DtqNoSchedulerLeader", "DtqRedisUnreachable"):
    if want not in alerts:
        fail("no alert %s" % want)

promtool = shutil.which("promtool")
if promtool:
    p = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    if p.returncode != 0:
        fail("promtool check rules:\n" + p.stdout + p.stderr)
else:
    print("promtool not found: the structure and names were checked, not the PromQL")

for f in failures:
    print("FAIL: " + f)
print("%d alerts, %d exported names, %d failures" % (len(alerts), len(exported), len(failures)))
sys.exit(1 if failures else 0)
