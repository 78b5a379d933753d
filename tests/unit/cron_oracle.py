#!/usr/bin/python3
"""cron_oracle.py ORACLE_BIN: src/cron.c against croniter (python3-croniter, Debian's
1.3.5, for /usr/bin/python3), seeded and deterministic.

Generates thousands of random specs (5 and 6 fields, steps, ranges, lists, month and day
names, 7 = Sunday) and random instants (over several years, and dense around the 2026 DST
days of America/New_York and Europe/Berlin), runs them through ORACLE_BIN (tests/unit/
cron_oracle.c: `spec<TAB>tz<TAB>after_ms` lines in, `next_ms`, `none` or `error <msg>`
out) and compares with croniter's next fire time for a tz-aware start.

croniter's DST semantics are not dtq's (cron.h): for a wall time that does not exist it
runs at the wall time plus the gap (02:30 EST read as 03:30 EDT, or the same instant
written 02:30-05:00), not at the transition; after a day with a change it may shift a
result by the change ("30 1 * * *" asked at 01:40 EDT on the US fall day answers 02:30
EST the next day). Where croniter's answer differs from the rule, the case is excluded
from the comparison, counted by reason, and dtq's answer is checked against the rule
instead, computed here independently: the first instant at which the zone's clock
(zoneinfo) reads the next matching wall time (croniter on naive datetimes) or later,
after the highest wall time the clock showed up to the asked instant. Any other mismatch
fails, printing the spec, zone, instant and both answers.

croniter's six-field form has the seconds LAST and does not read 7 as Sunday there: the
spec given to croniter moves the seconds to the end and spells day-of-week as a list.
"""
import random
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from croniter import croniter, CroniterBadCronError, CroniterBadDateError

SEED = 18
ZONES = ["UTC", "America/New_York", "Europe/Berlin"]
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
# name, lo, hi (the top a/n and * run to), names
FIELDS = {
    "sec": (0, 59, None),
    "min": (0, 59, None),
    "hour": (0, 23, None),
    "dom": (1, 31, None),
    "mon": (1, 12, MONTHS),
    "dow": (0, 7, DAYS),
}

rng = random.Random(SEED)


def value_text(field, v):
    lo, hi, names = FIELDS[field]
    if names and rng.random() < 0.3 and not (field == "dow" and v == 7):
        n = names[v - 1] if field == "mon" else names[v]
        return rng.choice([n, n.upper(), n.capitalize()])
    return str(v)


def gen_item(field, bias=None):
    """One list item: (text, set of values)."""
    lo, hi, _ = FIELDS[field]
    r = rng.random()
    if bias and rng.random() < 0.6:
        return rng.choice(bias)
    if r < 0.15:
        return "*", set(range(lo, hi + 1))
    if r < 0.3:
        n = rng.randint(1, min(hi - lo + 1, 20))
        return "*/%d" % n, set(range(lo, hi + 1, n))
    if r < 0.55:
        v = rng.randint(lo, hi)
        return value_text(field, v), {v}
    a = rng.randint(lo, hi)
    b = rng.randint(a, hi)
    if r < 0.75:
        return "%s-%s" % (value_text(field, a), value_text(field, b)), set(range(a, b + 1))
    n = rng.randint(1, max(1, b - a + 1))
    if r < 0.9:
        return ("%s-%s/%d" % (value_text(field, a), value_text(field, b), n),
                set(range(a, b + 1, n)))
    return "%s/%d" % (value_text(field, a), n), set(range(a, hi + 1, n))


def gen_field(field, star=0.3, bias=None):
    if rng.random() < star:
        lo, hi, _ = FIELDS[field]
        return "*", set(range(lo, hi + 1))
    items = [gen_item(field, bias) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    text = ",".join(t for t, _ in items)
    values = set().union(*(v for _, v in items))
    return text, values


def parse_bias(field, texts):
    lo, hi, _ = FIELDS[field]
    out = []
    for t in texts:
        vals = set()
        for part in t.split(","):
            step = 1
            if "/" in part:
                part, s = part.split("/")
                step = int(s)
            if part == "*":
                a, b = lo, hi
            elif "-" in part:
                a, b = map(int, part.split("-"))
            else:
                a = int(part)
                b = hi if step > 1 else a
            vals |= set(range(a, b + 1, step))
        out.append((t, vals))
    return out


# Specs for the DST days: the hours around the changes, the minutes often dense.
DST_HOURS = parse_bias("hour", ["1", "2", "3", "1-3", "2,3", "0-4/2", "*/2", "1,2", "0-2"])
DST_MINUTES = parse_bias("min", ["*", "*/15", "*/30", "0", "30", "59", "0,30", "10-50/20"])


def gen_spec(dst=False):
    """(our spec, croniter's spec, the value sets of sec min hour dom mon dow)."""
    six = rng.random() < 0.3
    fields = {}
    if dst:
        fields["sec"] = gen_field("sec", star=0.1, bias=parse_bias("sec", ["0", "30", "*/20"]))
        fields["min"] = gen_field("min", star=0.1, bias=DST_MINUTES)
        fields["hour"] = gen_field("hour", star=0.15, bias=DST_HOURS)
        fields["dom"] = gen_field("dom", star=0.8)
        fields["mon"] = gen_field("mon", star=0.85)
        fields["dow"] = gen_field("dow", star=0.75)
    else:
        for f in ("sec", "min", "hour", "dom", "mon", "dow"):
            fields[f] = gen_field(f, star={"sec": 0.2, "min": 0.1}.get(f, 0.4))
    dow_text, dow_vals = fields["dow"]
    ours = [fields[f][0] for f in ("min", "hour", "dom", "mon", "dow")]
    theirs = list(ours)
    if six:
        ours = [fields["sec"][0]] + ours
        theirs = theirs + [fields["sec"][0]]
        if 7 in dow_vals:  # croniter's six-field form keeps 7 as 7, which never matches
            theirs[4] = ",".join(str(v) for v in sorted({v % 7 for v in dow_vals}))
    sep = " " if rng.random() < 0.9 else "  "
    sets = {f: fields[f][1] for f in fields}
    if not six:
        sets["sec"] = {0}
    sets["dow"] = {v % 7 for v in dow_vals}
    return sep.join(ours), " ".join(theirs), sets


def transitions(zone, y0=2023, y1=2032):
    """[(instant, offset before, offset after)] of zone between the years."""
    z = ZoneInfo(zone)
    out = []
    t = int(datetime(y0, 1, 1, tzinfo=timezone.utc).timestamp())
    end = int(datetime(y1, 1, 1, tzinfo=timezone.utc).timestamp())

    def off(x):
        return datetime.fromtimestamp(x, z).utcoffset().total_seconds()

    prev = off(t)
    while t < end:
        n = t + 3600
        o = off(n)
        if o != prev:
            a, b = t, n
            while b - a > 1:
                m = (a + b) // 2
                if off(m) == prev:
                    a = m
                else:
                    b = m
            out.append((b, int(prev), int(o)))
            prev = o
        t = n
    return out


TRANS = {z: transitions(z) for z in ZONES}


def wall(t, z):
    return datetime.fromtimestamp(t, z).replace(tzinfo=None)


def resolve(w, z):
    """The first instant at which the clock reads w or later, and how w exists."""
    cands = []
    for fold in (0, 1):
        t = int(w.replace(tzinfo=z, fold=fold).timestamp())
        if wall(t, z) == w:
            cands.append(t)
    if cands:
        return min(cands), "repeated" if len(set(cands)) > 1 else "normal"
    a = int(w.replace(tzinfo=z, fold=1).timestamp())  # before the gap
    b = int(w.replace(tzinfo=z, fold=0).timestamp())  # after it
    a, b = min(a, b), max(a, b)
    assert wall(a, z) < w <= wall(b, z), (w, a, b)
    while b - a > 1:
        m = (a + b) // 2
        if wall(m, z) >= w:
            b = m
        else:
            a = m
    return b, "gap"


def naive_next(sets, m, limit_year):
    """The first wall time after m that the value sets match, searched day by day (an
    independent calendar: croniter's has bugs of its own, see main)."""
    hours, mins, secs = (sorted(sets[f]) for f in ("hour", "min", "sec"))
    dom_any = sets["dom"] == set(range(1, 32))
    dow_any = sets["dow"] == set(range(7))

    def day_ok(d):
        dom, dow = d.day in sets["dom"], d.isoweekday() % 7 in sets["dow"]
        return (dom and dow) if dom_any or dow_any else (dom or dow)

    def first_time(after):
        for h in hours:
            if after and h < after[0]:
                continue
            for mi in mins:
                if after and (h, mi) < after[:2]:
                    continue
                for s in secs:
                    if not after or (h, mi, s) > after:
                        return h, mi, s
        return None

    d, after = m.date(), (m.hour, m.minute, m.second)
    while d.year <= limit_year:
        if d.month not in sets["mon"]:
            d = (d.replace(day=1) + timedelta(days=32)).replace(day=1)
            after = None
            continue
        if day_ok(d):
            t = first_time(after)
            if t:
                return datetime(d.year, d.month, d.day, *t)
        d += timedelta(days=1)
        after = None
    return None


def rule_next(sets, zone, after_s):
    """dtq's rule (cron.h), independently: (instant or None, how its wall time exists,
    whether after_s is in a repeated hour)."""
    z = ZoneInfo(zone)
    m = wall(after_s, z)
    repeated = False
    for t, before, after in TRANS.get(zone, []):
        if after < before and t <= after_s < t + (before - after):
            m = max(m, wall(t - 1, z))
            repeated = True
    w = naive_next(sets, m, m.year + 8)
    if w is None:
        return None, None, repeated
    r, kind = resolve(w, z)
    assert r > after_s, (sets, zone, after_s, w, r)
    return r, kind, repeated


def croniter_next(cspec, zone, after_ms):
    start = datetime.fromtimestamp(after_ms / 1000, ZoneInfo(zone))
    try:
        return int(round(croniter(cspec, start).get_next(float) * 1000))
    except CroniterBadDateError:
        return None


def near_transition(zone, instants_s, within=2 * 86400, backward=None):
    for t, before, after in TRANS.get(zone, []):
        if backward is not None and (after < before) != backward:
            continue
        for x in instants_s:
            if x is not None and abs(x - t) <= within:
                return True
    return False


def croniter_gives_up_on_or(cspec, start):
    """croniter's day OR computes both sides and raises if either never fires (day 31 of
    30-day months OR a Tuesday): the side it gave up on never fires."""
    e = croniter.expand(cspec)[0]
    if e[2] == ["*"] or e[4] == ["*"]:
        return False
    f = cspec.split()
    f[4] = "*"
    try:
        croniter(" ".join(f), start).get_next(float)
    except CroniterBadDateError:
        return True
    return False


def croniter_skips_month_start(sets, rule_ms, zone):
    """croniter's day-of-month step goes to a day past the month's end (Feb 31 = Mar 3)
    and so skips the first days of the next month: the answer it skipped is on day 1-3
    and the set holds a day the previous month does not have."""
    w = wall(rule_ms // 1000, ZoneInfo(zone))
    prev_len = (w.replace(day=1) - timedelta(days=1)).day
    return w.day <= 3 and max(sets["dom"]) > prev_len


def fmt(ms):
    if ms is None:
        return "none"
    return "%d (%s)" % (ms, datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat())


# Specs both must refuse (croniter raises as well).
BAD = ["* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
       "* * * 13 *", "* * * * 8", "*/0 * * * *", "5-1 * * * *", "* * * dec-jan *",
       "* * * foo *", "* * * * moon", "1-2-3 * * * *", "-1 * * * *", "0 0 * * * 60"]


def bad_specs(n):
    """Valid specs with one field broken: out of range, reversed range, step 0, empty item."""
    out = []
    tops = [59, 23, 31, 12, 7]
    for _ in range(n):
        fields = ["0", "0", "*", "*", "*"]
        i = rng.randrange(5)
        kind = rng.randrange(4)
        if kind == 0:
            fields[i] = str(tops[i] + rng.randint(1, 50))
        elif kind == 1:
            a = rng.randint(2, tops[i] if i != 4 else 6)
            fields[i] = "%d-%d" % (a, rng.randint(1, a - 1))
        elif kind == 2:
            fields[i] = "*/0"
        else:
            fields[i] = rng.choice(["1,,2", "1,", ",1"])
        out.append(" ".join(fields))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: cron_oracle.py ORACLE_BIN")
    cases = []  # (spec, croniter spec, zone, after_ms)
    lo = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp())
    hi = int(datetime(2029, 1, 1, tzinfo=timezone.utc).timestamp())
    for _ in range(2500):
        spec, cspec, sets = gen_spec()
        for _ in range(2):
            after = rng.randint(lo, hi) * 1000 + rng.choice([0, 0, rng.randint(1, 999)])
            cases.append((spec, cspec, sets, rng.choice(ZONES), after))
    dst_days = [(z, t) for z in ZONES[1:] for t, _, _ in TRANS[z]
                if datetime.fromtimestamp(t, timezone.utc).year == 2026]
    assert len(dst_days) == 4, dst_days
    for _ in range(2500):
        spec, cspec, sets = gen_spec(dst=True)
        for _ in range(2):
            zone, t = rng.choice(dst_days)
            after = t + rng.choice([rng.randint(-30 * 3600, 30 * 3600),
                                    rng.randint(-3 * 3600, 3 * 3600),
                                    rng.choice([-3601, -3600, -1801, -1, 0, 1, 1799, 3599, 3600])])
            after = after * 1000 + rng.choice([0, 0, 0, 999, rng.randint(1, 998)])
            cases.append((spec, cspec, sets, zone, after))
    for spec in BAD + bad_specs(300):
        cases.append((spec, None, None, "UTC", 0))

    stdin = "".join("%s\t%s\t%d\n" % (s, z, a) for s, _, _, z, a in cases)
    out = subprocess.run([sys.argv[1]], input=stdin, capture_output=True, text=True, check=True)
    answers = out.stdout.splitlines()
    assert len(answers) == len(cases), (len(answers), len(cases))

    failures = 0
    agreed = refused = 0
    excluded = {}

    def fail(msg, spec, zone, after, ours, theirs):
        nonlocal failures
        failures += 1
        if failures <= 20:
            print("MISMATCH (%s): spec %r zone %s after %s: dtq %s, %s" %
                  (msg, spec, zone, fmt(after), ours if isinstance(ours, str) else fmt(ours),
                   theirs), file=sys.stderr)

    for (spec, cspec, sets, zone, after), ans in zip(cases, answers):
        if cspec is None:
            try:
                croniter(spec, datetime(2026, 1, 1))
                theirs_ok = True
            except (CroniterBadCronError, ValueError, KeyError):
                theirs_ok = False
            if not ans.startswith("error "):
                fail("must refuse", spec, zone, after, ans, "croniter accepts: %s" % theirs_ok)
            elif theirs_ok:
                fail("croniter accepts what dtq refuses", spec, zone, after, ans, "")
            else:
                refused += 1
            continue
        if ans.startswith("error "):
            fail("refused a valid spec", spec, zone, after, ans, "")
            continue
        ours = None if ans == "none" else int(ans)
        theirs = croniter_next(cspec, zone, after)
        r, kind, repeated = rule_next(sets, zone, after // 1000)
        rule = None if r is None else r * 1000
        if ours != rule:
            fail("the rule", spec, zone, after, ours,
                 "rule %s (croniter %s)" % (fmt(rule), fmt(theirs)))
            continue
        if ours == theirs:
            agreed += 1
            continue
        # croniter differs: excluded from the comparison when it is one of its known
        # differences (dtq was checked on the rule above), a failure otherwise
        z = ZoneInfo(zone)
        start = datetime.fromtimestamp(after / 1000, z)
        lag = 0
        if rule is not None:
            lag = abs(start.utcoffset() - datetime.fromtimestamp(rule / 1000, z).utcoffset())
            lag //= timedelta(milliseconds=1)
        instants = [after // 1000, rule and rule // 1000, theirs and theirs // 1000]
        if theirs is None and rule is not None and croniter_gives_up_on_or(cspec, start):
            reason = ("croniter raises when one side of a day-of-month OR day-of-week never "
                      "fires (not DST)")
        elif (rule is not None and (theirs is None or theirs > rule) and
              croniter_skips_month_start(sets, rule, zone)):
            reason = ("croniter steps to a day past the month's end and skips the next "
                      "month's first days (not DST)")
        elif kind == "gap" and near_transition(zone, instants, backward=False):
            reason = ("nonexistent wall time: croniter runs it at the wall time plus the gap "
                      "(or later), dtq at the transition")
        elif (theirs is not None and theirs <= after and
              near_transition(zone, instants, within=3 * 3600, backward=True)):
            reason = "at a fall-back: croniter answers a time at or before the instant asked"
        elif (repeated or kind == "repeated" or
              near_transition(zone, instants, within=3 * 3600, backward=True)):
            reason = ("repeated wall time: croniter runs the second occurrence too, or "
                      "shifts the next day")
        elif lag and theirs is not None and abs(theirs - rule) == lag:
            reason = ("a DST change between the instant and the answer: croniter shifts its "
                      "answer by the change (often to a wall time the spec does not match)")
        else:
            fail("croniter differs otherwise", spec, zone, after, ours, "croniter " + fmt(theirs))
            continue
        excluded[reason] = excluded.get(reason, 0) + 1

    total = len(cases)
    print("cron_oracle: seed %d, %d cases: %d agree with croniter, %d refused by both, "
          "%d excluded (croniter's differences below; dtq checked on the rule instead), "
          "%d failures" % (SEED, total, agreed, refused, sum(excluded.values()), failures))
    for reason, n in sorted(excluded.items()):
        print("  excluded: %5d  %s" % (n, reason))
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
