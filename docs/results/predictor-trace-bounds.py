#!/usr/bin/env python3
"""Bounds on what re-weighting P2's members could reach, from `hetgpu predict eval --trace`.

Usage: python3 docs/results/predictor-trace-bounds.py trace-gavel-1.jsonl [more traces]

For protocols (b) and (b') it prints each member's MAE, the combination's, fixed log-space
mixes, and two oracles that see the truth (so are bounds, not estimators): the best member
(or best convex transfer/completion weight, on an 0.1 grid) chosen per held-out job, and the
best member chosen per cell.
"""
import collections
import json
import math
import sys

MEMBERS3 = ("transfer", "lowrank", "posterior")
# The roofline member (from the third round on) joins when the trace has it.
MEMBERS4 = MEMBERS3 + ("roofline",)


def rel(logv, truth):
    return abs(math.exp(logv) / truth - 1)


def main(paths):
    for path in paths:
        rows = [json.loads(line) for line in open(path)]
        MEMBERS = MEMBERS4 if any("roofline" in e["estimates"] for e in rows) else MEMBERS3
        for proto in ("b", "b_entry"):
            es = [e for e in rows if e["protocol"] == proto and all(k in e["estimates"] for k in MEMBERS3)]
            if not es:
                continue
            # A cell without a roofline estimate (no run at its count on another type) counts
            # the transfer's for it.
            lg = lambda e, k: math.log(e["estimates"].get(k, e["estimates"]["transfer"])["Throughput"])
            mae = lambda f: sum(rel(f(e), e["throughput"]) for e in es) / len(es)
            out = {k: mae(lambda e, k=k: lg(e, k)) for k in MEMBERS + ("p1p2",)}
            out["mix tr.8/lr.2"] = mae(lambda e: 0.8 * lg(e, "transfer") + 0.2 * lg(e, "lowrank"))
            out["median of 3"] = mae(lambda e: sorted(lg(e, k) for k in MEMBERS3)[1])
            by = collections.defaultdict(list)
            for e in es:
                by[e["job"]].append(e)
            sel = wsum = 0.0
            for jes in by.values():
                sel += min(sum(rel(lg(e, k), e["throughput"]) for e in jes) for k in MEMBERS)
                wsum += min(sum(rel(w * lg(e, "transfer") + (1 - w) * lg(e, "lowrank"), e["throughput"]) for e in jes)
                            for w in [i / 10 for i in range(11)])
            out["oracle member per job"] = sel / len(es)
            if "roofline" in MEMBERS:
                sel3 = sum(min(sum(rel(lg(e, k), e["throughput"]) for e in jes) for k in MEMBERS3) for jes in by.values())
                out["oracle member per job, without roofline"] = sel3 / len(es)
                out["mix tr.9/rf.1"] = mae(lambda e: 0.9 * lg(e, "transfer") + 0.1 * lg(e, "roofline"))
            out["oracle tr/lr weight per job"] = wsum / len(es)
            out["oracle member per cell"] = sum(min(rel(lg(e, k), e["throughput"]) for k in MEMBERS) for e in es) / len(es)
            print(path, proto, len(es), "cells")
            for k, v in out.items():
                print("  %-28s %.4f" % (k, v))


if __name__ == "__main__":
    main(sys.argv[1:])
