#!/usr/bin/python3
"""Parses Prometheus text format from stdin with prometheus_client's own parser
(Debian's python3-prometheus-client) and prints the families as JSON for tests/integration/it_obs.c:
[{"name", "type", "help", "samples": [{"name", "labels": {...}, "value"}]}].
Exits non-zero when the text does not parse."""
import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

families = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    families.append({
        "name": fam.name,
        "type": fam.type,
        "help": fam.documentation,
        "samples": [{"name": s.name, "labels": s.labels,
                     "value": s.value if math.isfinite(s.value) else str(s.value)}
                    for s in fam.samples],
    })
json.dump(families, sys.stdout)
