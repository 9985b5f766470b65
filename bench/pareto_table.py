#!/usr/bin/env python3
"""Summarises bench/prune_pareto.sh: one markdown row per run (uniform U,
floors F1/F2 (and F3 when run), latency objective L1-L3) from its prune-J.json and deploy-J.json
(and the latency table), then issue 17's acceptance checks.

    bench/pareto_table.py DIR [--table T.json] [--targets "1.1x 1.25x 1.5x"] [--jobs "F1 F2 L1"]
                          [--floors F1=SPEC F2=SPEC] [--uniform 0.9]

Measured times are deploy's mixed fp16 plan (mixed_fp16.batch_ms at deploy's
batch, batch1_ms) and the dense fp16 engine of the same process; the
predicted time of every run is the table's (prune/latency.c's piecewise-linear
interpolation, flat beyond the grid) at the run's per-layer sparsities, and
for latency runs also the prune tool's own prediction and its measurement of
the whole graph.
"""
import argparse
import glob
import os
import re
import sys

from tablelib import dense_engine, fmt, load, num, ratio

ORDER = ["N", "W", "U", "F1", "F2", "F3"] + [f"L{i}" for i in range(1, 10)] + [f"S{i}" for i in range(1, 10)]



def layer_ms(table, row, s):
    """Milliseconds of one table row at sparsity s (as lat_layer_ms)."""
    g = table["grid"]
    if s <= g[0]:
        return row[0]
    if s >= g[-1]:
        return row[-1]
    k = 0
    while k + 2 < len(g) and s >= g[k + 1]:
        k += 1
    u = (s - g[k]) / (g[k + 1] - g[k])
    return row[k] + u * (row[k + 1] - row[k])


def predict(table, sparsity_of):
    """The table's milliseconds for per-layer sparsities (name -> s); None when a layer is missing."""
    if not table:
        return None
    ms = table["rest_ms"]
    for name, row in zip(table["layers"], table["ms"]):
        if name not in sparsity_of:
            return None
        ms += layer_ms(table, row, sparsity_of[name])
    return ms


def layer_sparsities(prune):
    """Pruned tensor name -> sparsity from a prune summary."""
    return {l["name"]: l["sparsity"] for l in prune.get("layers", []) if l.get("pruned")}




def run_row(tag, prune, deploy, table, setting):
    """One run's figures as a dict (None where absent)."""
    lat = (prune or {}).get("latency") or {}
    mixed = (deploy or {}).get("mixed_fp16") or {}
    eng = dense_engine(deploy)
    r = {"tag": tag, "setting": setting, "ok_prune": prune is not None, "ok_deploy": bool(mixed)}
    r["sparsity"] = num((prune or {}).get("sparsity"))
    r["mac_sparsity"] = num((prune or {}).get("mac_sparsity"))
    r["val"] = num((prune or {}).get("val_accuracy"))
    r["test"] = num((prune or {}).get("test_accuracy"))
    r["engine_test"] = num(mixed.get("test_accuracy"))
    r["pred"] = predict(table, layer_sparsities(prune)) if prune else None
    r["pred_prune"] = num(lat.get("predicted_ms"))
    r["target"] = num(lat.get("target_ms"))
    r["graph_prune"] = num(lat.get("measured_ms"))
    r["checks"], r["scale"] = lat.get("checks") or 0, num(lat.get("check_scale"))
    r["ms"], r["ms1"] = num(mixed.get("batch_ms")), num(mixed.get("batch1_ms"))
    r["dense"], r["dense1"] = num(eng.get("batch_ms")), num(eng.get("batch1_ms"))
    r["batch"] = (deploy or {}).get("batch")
    r["sparse_layers"] = mixed.get("sparse_layers")
    return r




def settings(args, tag, prune):
    """Words for a run's setting."""
    if tag == "U":
        return f"uniform {args.uniform}"
    if tag in ("N", "W"):
        return f"{'unstructured' if tag == 'N' else (prune or {}).get('pattern', 'pattern')} {args.uniform}, by weights"
    if tag.startswith("F"):
        spec = dict(f.split("=", 1) for f in args.floors if "=" in f).get(tag) or (prune or {}).get("layer_floor")
        return f"floors {spec}"
    k = int(tag[1:]) - 1
    t = args.targets.split() if args.targets else []
    fixed = f" at sparsity {args.uniform}" if tag.startswith("S") else ""
    if k < len(t):
        return f"latency target {t[k]}{fixed}"
    lat = (prune or {}).get("latency") or {}
    aim, dense = lat.get("target_ms"), lat.get("dense_predicted_ms")
    return f"latency target {dense / aim:.2f}x ({aim:.4f} ms){fixed}" if aim and dense else "latency target ?"


def table_lines(table):
    """Lines about the latency table: its source, dense and best predictions."""
    if not table:
        return ["Latency table: none found."]
    dense = table["rest_ms"] + sum(r[0] for r in table["ms"])
    best = table["rest_ms"] + sum(r[-1] for r in table["ms"])
    return [f"Latency table: {table.get('source')} on {table.get('gpu')}, plan {table.get('plan', 'per-layer')}, "
            f"{table.get('precision')} batch {table.get('batch')}; dense {dense:.4f} ms, every layer at "
            f"{table['grid'][-1]}: {best:.4f} ms ({dense / best:.2f}x)."]


def markdown(rows):
    """The runs as a markdown table."""
    head = ("| run | setting | sparsity (weights / compute) | val / test top-1 | mixed-plan test | predicted ms | prune's graph ms "
            "| mixed b128 ms | mixed b1 ms | dense engine b128 / b1 ms | speedup b128 / b1 | pred. error | sparse convs |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if not r["ok_prune"]:
            out.append(f"| {r['tag']} | {r['setting']} | failed (see logs/{r['tag']}.log) |" + " |" * 10)
            continue
        pred = fmt(r["pred"], ".4f")
        if r["pred_prune"] is not None:
            pred += f" (prune {r['pred_prune']:.4f}, target {fmt(r['target'], '.4f')}"
            pred += f", {r['checks']} checks, scale {fmt(r['scale'], '.3f')})" if r["checks"] else ")"
        err = ratio(r["pred"], r["ms"])
        out.append(
            f"| {r['tag']} | {r['setting']} | {fmt(r['sparsity'], '.4f')} / {fmt(r['mac_sparsity'], '.4f')} "
            f"| {fmt(r['val'], '.2f')} / "
            f"{fmt(r['test'], '.2f')} | {fmt(r['engine_test'], '.2f')} | {pred} | {fmt(r['graph_prune'], '.4f')} | "
            f"{fmt(r['ms'], '.4f')} | {fmt(r['ms1'], '.4f')} | {fmt(r['dense'], '.4f')} / {fmt(r['dense1'], '.4f')} | "
            f"{fmt(ratio(r['dense'], r['ms']), '.2f')}x / {fmt(ratio(r['dense1'], r['ms1']), '.2f')}x | "
            f"{fmt(None if err is None else 100 * (err - 1), '+.1f')}% | {fmt(r['sparse_layers'], 'd')} |")
    return out


def pair_verdict(l, f):
    """Issue 17's comparison of latency run l with floors run f: (comparable, met, words). Met: at least
    as fast (within 5%) and >= 1 point more accurate, or at least as accurate (within 0.3) and >= 1.3x
    faster (a run better on both counts meets it too); comparable: met, or at the same latency or the
    same accuracy."""
    if None in (l["ms"], f["ms"], l["test"], f["test"]):
        return False, False, "not measured"
    d_acc, speed = l["test"] - f["test"], f["ms"] / l["ms"]
    met = (speed >= 1 / 1.05 and d_acc >= 1.0) or (d_acc >= -0.3 and speed >= 1.3)
    same = [w for w, c in (("latency within 5%", abs(speed - 1) <= 0.05), ("accuracy within 0.3", abs(d_acc) <= 0.3)) if c]
    words = f"test {d_acc:+.2f} points, {speed:.2f}x the speed" + (f" (same {', '.join(same)})" if same else "")
    return met or bool(same), met, words


def floors_line(l, floors):
    """Test margin of latency run l over the floors runs' line at l's measured time: the test top-1
    interpolated linearly in milliseconds between the two floors runs that bracket it (None when no
    two do). Fairer than a pair inside the 5% window, where a slower latency run meets a faster floors run."""
    pts = sorted((f["ms"], f["test"]) for f in floors if f["ms"] is not None and f["test"] is not None)
    if l["ms"] is None or l["test"] is None:
        return None
    for (m0, a0), (m1, a1) in zip(pts, pts[1:]):
        if m0 <= l["ms"] <= m1 and m1 > m0:
            return l["test"] - (a0 + (a1 - a0) * (l["ms"] - m0) / (m1 - m0))
    return None


def acceptance(rows):
    """Issue 17's checks as markdown lines."""
    lines = ["", "Acceptance (test top-1 from prune's summary; times: deploy's mixed fp16 plan at batch "
             f"{next((r['batch'] for r in rows if r['batch']), '?')}):"]
    lat = [r for r in rows if r["tag"].startswith("L") and r["ok_deploy"]]
    flo = [r for r in rows if r["tag"].startswith("F") and r["ok_deploy"]]
    decided = []
    for l in lat:
        for f in flo:
            comp, met, words = pair_verdict(l, f)
            if comp:
                decided.append(met)
            lines.append(f"- {l['tag']} vs {f['tag']}: {words}" + (f" -> {'MET' if met else 'not met'}" if comp else ""))
    if not decided:
        lines.append("- no comparable latency/floors pair: the criterion is not decided by these runs")
    else:
        lines.append(f"- comparable pairs: {len(decided)}, met: {sum(decided)}")
    for l in lat:
        m = floors_line(l, flo)
        lines.append(f"- {l['tag']} against the floors' line at its time: "
                     + ("outside the floors runs' times" if m is None else f"test {m:+.2f} points"))
    for r in rows:
        if r["pred"] is None or r["ms"] is None:
            continue
        e = r["pred"] / r["ms"] - 1
        own = ""
        if r["pred_prune"] is not None and r["graph_prune"] is not None:
            own = f"; prune's own: predicted {r['pred_prune']:.4f} vs graph {r['graph_prune']:.4f} ms " \
                  f"({100 * (r['pred_prune'] / r['graph_prune'] - 1):+.1f}%)"
        lines.append(f"- {r['tag']} prediction {r['pred']:.4f} vs deploy's mixed {r['ms']:.4f} ms: "
                     f"{100 * e:+.1f}% ({'within' if abs(e) <= 0.10 else 'NOT within'} 10%){own}")
    return lines


def busiest_row(b):
    """', busiest block row N blocks (mean M)' for a block layer of prune's summary, else ''."""
    if b.get("blocks_kept_row_max") is None:  # only block layers have it, with their KxC pattern
        return ""
    rows = int(b["shape"].split("x")[0]) // int(b["pattern"].split("x")[0])
    return f", busiest block row {b['blocks_kept_row_max']} blocks (mean {b['blocks_kept'] / rows:.1f})"


def layer_misses(tag, prune, worst=4):
    """Lines naming the layers where the table's time misses the final model's measured op time the most."""
    layers = [l for l in ((prune or {}).get("latency") or {}).get("layers") or []
              if num(l.get("measured_ms")) is not None and num(l.get("table_ms")) is not None]
    if not layers:
        return []
    layers.sort(key=lambda l: -abs(l["table_ms"] - l["measured_ms"]))
    info = {l.get("name"): l for l in (prune or {}).get("layers") or []}
    words = ", ".join(f"{l['name'].removesuffix('.weight')} at {l['sparsity']:.3f}: table {l['table_ms']:.4f} vs "
                      f"{l['measured_ms']:.4f} ms{busiest_row(info.get(l['name']) or {})}" for l in layers[:worst])
    miss = sum(l["table_ms"] - l["measured_ms"] for l in layers)
    return [f"- {tag}: layers' table - measured = {miss:+.4f} ms in all; largest: {words}"]


def tags_in(d):
    """The run tags with a prune summary in d, in ORDER."""
    found = {re.sub(r"^prune-(.*)\.json$", r"\1", os.path.basename(p)) for p in glob.glob(os.path.join(d, "prune-*.json"))}
    return [t for t in ORDER if t in found]


def tags_logged(d):
    """The run tags with a log in d's sibling logs folder (runs that were started)."""
    logs = os.path.join(os.path.dirname(os.path.abspath(d)), "logs")
    return [t for t in ORDER if os.path.exists(os.path.join(logs, f"{t}.log"))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="folder of prune-J.json / deploy-J.json")
    ap.add_argument("--table", help="the latency table JSON")
    ap.add_argument("--targets", help="latency targets of L1, L2, ... (default: from each run's prune summary)")
    ap.add_argument("--floors", nargs="*", default=[], help="F1=SPEC F2=SPEC [F3=SPEC]")
    ap.add_argument("--uniform", default="0.9")
    ap.add_argument("--jobs", help="runs expected, failed ones listed (default: those with a summary or a log in DIR/../logs)")
    a = ap.parse_args()
    table = load(a.table) if a.table else None
    tags = [t for t in ORDER if t in set(a.jobs.split() if a.jobs else tags_logged(a.dir)) | set(tags_in(a.dir))]
    rows = []
    for t in tags:
        p = load(os.path.join(a.dir, f"prune-{t}.json"))
        d = load(os.path.join(a.dir, f"deploy-{t}.json"))
        rows.append(run_row(t, p, d, table, settings(a, t, p)))
    model = next((load(os.path.join(a.dir, f"prune-{t}.json")) or {}).get("model") for t in tags) if tags else "?"
    print(f"## Pareto runs: {model}\n")
    print("\n".join(table_lines(table)) + "\n")
    print("\n".join(markdown(rows)))
    print("\n".join(acceptance(rows)))
    misses = [m for t in tags for m in layer_misses(t, load(os.path.join(a.dir, f"prune-{t}.json")))]
    if misses:
        print("\nWhere the latency table misses the final models' layers (prune's own measurement):")
        print("\n".join(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
