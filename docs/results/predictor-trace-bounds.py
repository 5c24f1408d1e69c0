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

MEMBERS = ("transfer", "lowrank", "posterior")


def rel(logv, truth):
    return abs(math.exp(logv) / truth - 1)


def main(paths):
    for path in paths:
        rows = [json.loads(line) for line in open(path)]
        for proto in ("b", "b_entry"):
            es = [e for e in rows if e["protocol"] == proto and all(k in e["estimates"] for k in MEMBERS)]
            if not es:
                continue
            lg = lambda e, k: math.log(e["estimates"][k]["Throughput"])
            mae = lambda f: sum(rel(f(e), e["throughput"]) for e in es) / len(es)
            out = {k: mae(lambda e, k=k: lg(e, k)) for k in MEMBERS + ("p1p2",)}
            out["mix tr.8/lr.2"] = mae(lambda e: 0.8 * lg(e, "transfer") + 0.2 * lg(e, "lowrank"))
            out["median of 3"] = mae(lambda e: sorted(lg(e, k) for k in MEMBERS)[1])
            by = collections.defaultdict(list)
            for e in es:
                by[e["job"]].append(e)
            sel = wsum = 0.0
            for jes in by.values():
                sel += min(sum(rel(lg(e, k), e["throughput"]) for e in jes) for k in MEMBERS)
                wsum += min(sum(rel(w * lg(e, "transfer") + (1 - w) * lg(e, "lowrank"), e["throughput"]) for e in jes)
                            for w in [i / 10 for i in range(11)])
            out["oracle member per job"] = sel / len(es)
            out["oracle tr/lr weight per job"] = wsum / len(es)
            out["oracle member per cell"] = sum(min(rel(lg(e, k), e["throughput"]) for k in MEMBERS) for e in es) / len(es)
            print(path, proto, len(es), "cells")
            for k, v in out.items():
                print("  %-28s %.4f" % (k, v))


if __name__ == "__main__":
    main(sys.argv[1:])
