#!/usr/bin/env python3
"""Issue 16's acceptance table from bench/pattern_table.sh's JSON summaries.

One row per model, pattern and target sparsity (prune-MODEL-PATTERN-SPARSITY.json,
deploy-...json) with validation / test top-1, deploy's mixed fp16 plan at batch
128 and 1, the dense fp16 engine of the same process, PyTorch's BN-folded CUDA
graph of the same weights (torch-MODEL.json, bench/dense_pytorch.py) and the
speedups against both; then, per model and sparsity, how far each pattern's
test top-1 is from the unstructured model's and whether the 1.5x / 1.3x
speedups of the acceptance hold, whether every block-sparse layer at >= 90%
runs faster than its cuDNN conv alone (deploy's per-layer times; rows of one
KxC pattern), and how deploy's accuracy compares with prune's and the CPU
reference's. A job of several seeds (target written
0.95s2, bench/pattern_table.sh SEEDS) is judged against the unstructured model
of its own seed, and each pattern and target then gets its mean, best and
worst gap over the seeds.

Usage: bench/pattern_table.py DIR
"""
import glob
import os
import re
import statistics
import sys

from tablelib import dense_engine, fmt, load, num, ratio

PATTERN_ORDER = ["unstructured", "8x1", "16x1", "16x8", "16x8+0.2", "2of4"]


def torch_ms(d, batch):
    """PyTorch's fp16 CUDA-graph milliseconds at batch (dense_pytorch.py's rows), or None."""
    for r in (d or {}).get("rows", []):
        if r.get("precision") == "fp16" and r.get("batch") == batch:
            return num(r.get("graph_ms"))
    return None


def split_target(target):
    """(target without its seed, seed or None): '0.95fs2' -> ('0.95f', '2')."""
    m = re.fullmatch(r"(.*?)s([0-9]+)", target)
    return (m.group(1), m.group(2)) if m else (target, None)


def layer_bar(dep, pattern):
    """(block layers at >= 90%, the slowest one's name, its cuDNN / block-kernel time ratio) from deploy's
    per-layer times, for a row whose every pruned layer has the block pattern (KxC); None otherwise."""
    if not re.fullmatch(r"[0-9]+x[0-9]+", pattern or ""):
        return None
    sp = {l.get("name"): num(l.get("sparsity")) for l in dep.get("layers", [])}
    n, worst = 0, None
    for l in (dep.get("mixed_fp16") or {}).get("layers", []):
        x = ratio(num(l.get("cudnn_ms")), num(l.get("sparse_ms")))
        if (sp.get(l.get("name")) or 0) < 0.9 or x is None:
            continue
        n += 1
        if worst is None or x < worst[1]:
            worst = (l.get("name"), x)
    return (n, *worst) if worst else (0, None, None)


def row(d, tag):
    """One job's figures (None where absent)."""
    model, pat, sp = tag.split("-", 2)
    p = load(os.path.join(d, f"prune-{tag}.json")) or {}
    dep = load(os.path.join(d, f"deploy-{tag}.json")) or {}
    torch = load(os.path.join(d, f"torch-{model}.json"))
    mixed = dep.get("mixed_fp16") or {}
    eng = dense_engine(dep)
    target, seed = split_target(sp)
    r = dict(model=model, pattern=p.get("pattern") or pat.replace("of", ":"), target=target, seed=seed,
             sparsity=num(p.get("sparsity")),
             mac_sparsity=num(p.get("mac_sparsity")),
             val=num(p.get("val_accuracy")), test=num(p.get("test_accuracy")),
             engine_test=num(mixed.get("test_accuracy")), ms=num(mixed.get("batch_ms")),
             ms1=num(mixed.get("batch1_ms")), dense=num(eng.get("batch_ms")), dense1=num(eng.get("batch1_ms")),
             pt=torch_ms(torch, dep.get("batch") or 128), pt1=torch_ms(torch, 1),
             block_layers=mixed.get("sparse_layers"), agree=mixed.get("cpu_agreement_images"),
             compared=mixed.get("cpu_compared_images"))
    r["layer_bar"] = layer_bar(dep, r["pattern"]) if dep else None
    r["x_engine"], r["x_engine1"] = ratio(r["dense"], r["ms"]), ratio(r["dense1"], r["ms1"])
    r["x_pt"], r["x_pt1"] = ratio(r["pt"], r["ms"]), ratio(r["pt1"], r["ms1"])
    return r


def tags(d):
    """Job tags with a prune summary in d, by model, sparsity, seed, allocation, then PATTERN_ORDER."""
    found = [re.sub(r"^prune-(.*)\.json$", r"\1", os.path.basename(p)) for p in glob.glob(os.path.join(d, "prune-*.json"))]

    def key(t):
        m, p, s = t.split("-", 2)
        target, seed = split_target(s)
        return (m, target.rstrip("uf"), int(seed or 0), target,
                PATTERN_ORDER.index(p) if p in PATTERN_ORDER else len(PATTERN_ORDER), p)
    return sorted((t for t in found if t.count("-") >= 2), key=key)


def markdown(rows):
    out = ["| model | pattern | target | sparsity (weights / compute) | val / test top-1 | engine test "
           "| mixed b128 / b1 ms | dense engine b128 / b1 ms | PyTorch graph b128 / b1 ms | x engine b128 / b1 "
           "| x PyTorch b128 / b1 | sparse convs |", "|" + "---|" * 12]
    for r in rows:
        target = r["target"] + (f" seed {r['seed']}" if r["seed"] else "")
        out.append(f"| {r['model']} | {r['pattern']} | {target} | {fmt(r['sparsity'], '.4f')} / "
                   f"{fmt(r['mac_sparsity'], '.4f')} "
                   f"| {fmt(r['val'], '.2f')} / {fmt(r['test'], '.2f')} | {fmt(r['engine_test'], '.2f')} "
                   f"| {fmt(r['ms'], '.4f')} / {fmt(r['ms1'], '.4f')} | {fmt(r['dense'], '.4f')} / {fmt(r['dense1'], '.4f')} "
                   f"| {fmt(r['pt'], '.4f')} / {fmt(r['pt1'], '.4f')} | {fmt(r['x_engine'], '.2f')}x / "
                   f"{fmt(r['x_engine1'], '.2f')}x | {fmt(r['x_pt'], '.2f')}x / {fmt(r['x_pt1'], '.2f')}x "
                   f"| {r['block_layers'] if r['block_layers'] is not None else '-'} |")
    return out


def gap(r, base, key="test"):
    """r's test (key 'val': validation) top-1 minus that of the unstructured row of its model, sparsity (the
    weights' allocation, also for a uniform row, target 'Xu', and a row with floors, 'Xf') and seed, or None."""
    u = base.get((r["model"], r["target"].rstrip("uf"), r["seed"]))
    return r[key] - u[key] if u and r[key] is not None and u[key] is not None else None


def judged(rows):
    """The rows judged against unstructured (all but the unstructured rows of the weights' allocation) and
    the unstructured rows by (model, target, seed)."""
    base = {(r["model"], r["target"], r["seed"]): r for r in rows if r["pattern"] == "unstructured"}
    return [r for r in rows if r["pattern"] != "unstructured" or r["target"].endswith(("u", "f"))], base


def verdicts(rows):
    """Per row against the unstructured row of its model, sparsity and seed: accuracy gap and the speedup bars."""
    todo, base = judged(rows)
    out = []
    for r in todo:
        g = gap(r, base)
        fast = [v for v in (r["x_engine"], r["x_pt"]) if v is not None]
        fast1 = [v for v in (r["x_engine1"], r["x_pt1"]) if v is not None]
        b128 = "?" if len(fast) < 2 else ("yes" if min(fast) >= 1.5 else "no")
        b1 = "?" if len(fast1) < 2 else ("yes" if min(fast1) >= 1.3 else "no")
        acc = "?" if g is None else ("yes" if g >= -1.0 else "no")
        seed = f" seed {r['seed']}" if r["seed"] else ""
        out.append(f"- {r['model']} {r['pattern']} at {r['target']}{seed}: test top-1 {fmt(g, '+.2f')} vs unstructured "
                   f"(within 1 point: {acc}); batch 128 >= 1.5x over engine and PyTorch: {b128}; "
                   f"batch 1 >= 1.3x: {b1}{layer_words(r['layer_bar'])}{deploy_words(r)}")
    return out


def layer_words(bar):
    """The per-layer bar in words ('' when not judged)."""
    if bar is None:
        return ""
    n, name, x = bar
    if n == 0:
        return "; no block layer at >= 90%"
    return (f"; block layers at >= 90%: {n}, each faster than its cuDNN conv: {'yes' if x > 1.0 else 'no'} "
            f"(slowest {name} {x:.2f}x)")


def deploy_words(r):
    """deploy's test top-1 against prune's and its top-1 agreement with the CPU reference ('' without them)."""
    if r["engine_test"] is None or r["test"] is None:
        return ""
    cpu = f", top-1 = CPU on {r['agree']} of {r['compared']}" if r["compared"] else ""
    return f"; deploy test {r['engine_test'] - r['test']:+.2f} vs prune{cpu}"


def over_seeds(rows):
    """Per model, pattern and target measured with two or more seeds: the mean, best and worst test gap to
    unstructured (each seed against its own), the mean validation gap (which choices are made on) and the
    mean batch-128 speedup over the engine."""
    todo, base = judged(rows)
    groups = {}
    for r in todo:
        g = gap(r, base)
        if r["seed"] is not None and g is not None:
            groups.setdefault((r["model"], r["pattern"], r["target"]), []).append((g, r["x_engine"], gap(r, base, "val")))
    out = []
    for (model, pattern, target), v in groups.items():
        if len(v) < 2:
            continue
        gaps = [g for g, _, _ in v]
        xs = [x for _, x, _ in v if x is not None]
        vals = [w for _, _, w in v if w is not None]
        mean = statistics.mean(gaps)
        out.append(f"- {model} {pattern} at {target}, {len(v)} seeds: test top-1 {mean:+.2f} on average vs unstructured "
                   f"(best {max(gaps):+.2f}, worst {min(gaps):+.2f}; within 1 point on average: "
                   f"{'yes' if mean >= -1.0 else 'no'}; validation {fmt(statistics.mean(vals) if vals else None, '+.2f')} "
                   f"on average); batch 128 x engine {fmt(statistics.mean(xs) if xs else None, '.2f')}x")
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    d = sys.argv[1]
    rows = [row(d, t) for t in tags(d)]
    dev = next((load(p).get("device") for p in glob.glob(os.path.join(d, "deploy-*.json")) if load(p)), "?")
    print(f"## Patterns (issue 16): {dev}\n")
    print("\n".join(markdown(rows)))
    print("\nAgainst the unstructured model of the same model and sparsity (acceptance bars; '?': not measured):")
    print("\n".join(verdicts(rows)) or "- no pattern rows")
    seeds = over_seeds(rows)
    if seeds:
        print("\nOver the seeds:")
        print("\n".join(seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
