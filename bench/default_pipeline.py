#!/usr/bin/env python3
"""The table of bench/default_pipeline.sh: per setting of the mission's pipeline (prune from
scratch, quantize --centroids 16, export, deploy's mixed fp16 plan), validation / test top-1
after prune and after quantize, and the deployed times against the dense fp16 engine of the
same process; the dense model (train's defaults) as the yardstick; and the setting a rule on
validation picks: the fastest at batch 128 whose quantized validation top-1 is within 0.5
points of the dense model's. Test figures are shown, never used to choose.

usage: default_pipeline.py JSON_DIR SETTING [SETTING ...]
"""
import os, sys

from tablelib import dense_engine, fmt, load, num, ratio


def row(d, s):
    """One setting's figures (None where a step is missing)."""
    p, q, dep = (load(os.path.join(d, f'{k}-{s}.json')) or {} for k in ('prune', 'quantize', 'deploy'))
    mixed, eng = dep.get('mixed_fp16') or {}, dense_engine(dep)
    r = dict(setting=s, p_val=num(p.get('val_accuracy')), p_test=num(p.get('test_accuracy')),
             sparsity=num(p.get('sparsity')), q_val=num(q.get('val_accuracy')), q_test=num(q.get('test_accuracy')),
             ms=num(mixed.get('batch_ms')), ms1=num(mixed.get('batch1_ms')), dense=num(eng.get('batch_ms')),
             dense1=num(eng.get('batch1_ms')), e_test=num(mixed.get('test_accuracy')))
    r['x'], r['x1'] = ratio(r['dense'], r['ms']), ratio(r['dense1'], r['ms1'])
    return r


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    d, settings = sys.argv[1], sys.argv[2:]
    dense = load(os.path.join(d, 'train-dense.json')) or {}
    dv, dt = num(dense.get('val_accuracy')), num(dense.get('test_accuracy'))
    print('### The default pipeline, one run per setting\n')
    print(f'Dense model (train\'s defaults): val {fmt(dv, ".2f")} / test {fmt(dt, ".2f")}.\n')
    print('| setting | sparsity | prune val / test | quantized val / test | deployed test | mixed fp16 b128 / b1 ms '
          '| dense fp16 engine b128 / b1 ms | x engine b128 / b1 |')
    print('|---|---|---|---|---|---|---|---|')
    rows = [row(d, s) for s in settings]
    for r in rows:
        print(f"| {r['setting']} | {fmt(r['sparsity'], '.4f')} | {fmt(r['p_val'], '.2f')} / {fmt(r['p_test'], '.2f')} "
              f"| {fmt(r['q_val'], '.2f')} / {fmt(r['q_test'], '.2f')} | {fmt(r['e_test'], '.2f')} "
              f"| {fmt(r['ms'], '.4f')} / {fmt(r['ms1'], '.4f')} | {fmt(r['dense'], '.4f')} / {fmt(r['dense1'], '.4f')} "
              f"| {fmt(r['x'], '.2f')}{'x' if r['x'] else ''} / {fmt(r['x1'], '.2f')}{'x' if r['x1'] else ''} |")
    ok = [r for r in rows if r['x'] and r['q_val'] is not None and dv is not None and r['q_val'] >= dv - 0.5]
    print()
    if dv is None:
        print('No dense model yet: no choice.')
    elif not ok:
        print('No setting keeps its quantized validation top-1 within 0.5 points of the dense model\'s.')
    else:
        best = max(ok, key=lambda r: r['x'])
        print(f"Chosen on validation (fastest within 0.5 validation points of the dense model): {best['setting']}, "
              f"{best['x']:.2f}x the dense fp16 engine at batch 128.")


if __name__ == '__main__':
    main()
