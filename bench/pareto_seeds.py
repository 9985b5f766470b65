#!/usr/bin/env python3
"""Issue 17's latency-vs-floors comparison over several seeds of
bench/prune_pareto.sh (one JSON folder per seed, same model, targets and
floors): for every latency run and floors run of the same seed, the test
margin and speed ratio per seed, then per pair the mean and the worst
margin and whether the pair meets the bar in every seed that compares it;
then per latency run its margin over the floors' line at its own time
(pareto_table.floors_line: interpolated between the floors runs around it).

    bench/pareto_seeds.py DIR [DIR ...]     (e.g. WORK/json of SEED=1 and of SEED=2)

Comparable and met as in bench/pareto_table.py (pair_verdict); times are
deploy's mixed fp16 plan at its batch, accuracies prune's test top-1.
"""
import argparse
import os
import sys

from pareto_table import floors_line, pair_verdict, run_row, tags_in
from tablelib import load


def seed_rows(d):
    """The measured rows of one seed's folder, by tag (no table: predictions are not needed here)."""
    rows = {}
    for t in tags_in(d):
        r = run_row(t, load(os.path.join(d, f"prune-{t}.json")), load(os.path.join(d, f"deploy-{t}.json")), None, "")
        if r["ok_deploy"]:
            rows[t] = r
    return rows


def pair_lines(seeds):
    """One markdown row per latency/floors pair compared in at least one seed."""
    lat = sorted({t for s in seeds for t in s if t.startswith("L")})
    flo = sorted({t for s in seeds for t in s if t.startswith("F")})
    out = ["| pair | per seed: test margin, speed ratio (verdict) | mean margin | worst margin | met in every compared seed |",
           "|---|---|---|---|---|"]
    for l in lat:
        for f in flo:
            cells, margins, verdicts = [], [], []
            for k, s in enumerate(seeds, 1):
                if l not in s or f not in s:
                    cells.append(f"seed {k}: -")
                    continue
                comp, met, _ = pair_verdict(s[l], s[f])
                d, sp = s[l]["test"] - s[f]["test"], s[f]["ms"] / s[l]["ms"]
                margins.append(d)
                if comp:
                    verdicts.append(met)
                cells.append(f"seed {k}: {d:+.2f}, {sp:.2f}x ({'met' if met else 'not met' if comp else 'not comparable'})")
            if not verdicts:
                continue
            out.append(f"| {l} vs {f} | {'; '.join(cells)} | {sum(margins) / len(margins):+.2f} | {min(margins):+.2f} | "
                       f"{'yes' if all(verdicts) else 'no'} ({sum(verdicts)} of {len(verdicts)}) |")
    return out


def line_lines(seeds):
    """One markdown row per latency run: its test margin over the floors' line at its time (floors_line), per seed."""
    out = ["| latency run | per seed: test margin over the floors' line at its time | mean |", "|---|---|---|"]
    for l in sorted({t for s in seeds for t in s if t.startswith("L")}):
        cells, margins = [], []
        for k, s in enumerate(seeds, 1):
            m = floors_line(s[l], [s[f] for f in s if f.startswith("F")]) if l in s else None
            cells.append(f"seed {k}: " + ("-" if m is None else f"{m:+.2f}"))
            if m is not None:
                margins.append(m)
        mean = f"{sum(margins) / len(margins):+.2f}" if margins else "-"
        out.append(f"| {l} | {'; '.join(cells)} | {mean} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", help="one folder of prune-J.json / deploy-J.json per seed")
    a = ap.parse_args()
    seeds = [seed_rows(d) for d in a.dirs]
    if not any(seeds):
        print("pareto_seeds: no deployed runs in " + " ".join(a.dirs), file=sys.stderr)
        return 1
    print("\n".join(pair_lines(seeds) + [""] + line_lines(seeds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
