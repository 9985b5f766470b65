#!/usr/bin/env python3
"""Markdown tables of issue 20 from the outputs of bench/seed_nets.sh.

usage: bench/seed_table.py SEED...    (each a seed-NET.tar.gz or a folder holding its files:
                                       train.json, train_pytorch.json, params.txt, prune.json,
                                       deploy_with-fp16.json, deploy_with-fp32.json and the same
                                       for deploy_without (or one deploy_with.json holding both
                                       precisions); missing ones print -; a deploy_without-PREC.json
                                       holding {"same_plan_as": "deploy_with-PREC"} stands for that
                                       run's plan, marked "same plan")

Tables: training (ours against PyTorch, same recipe and epochs), end-to-end deploy speed at
the deploy batch and at batch 1 (each plan's time over the dense fp16 engine and over the
all-dense fp32 network, with and without the activation-sparse candidates), deploy's
accuracy against the CPU reference, and the layers where an activation-sparse candidate was
chosen (its time against the best other candidate of the same precision that passed).
"""
import io, json, math, os, sys, tarfile

from tablelib import dense_engine

NAMES = ['train', 'train_pytorch', 'prune', 'export', 'deploy_with', 'deploy_without']
# The choosable candidates of each plan precision (runtime/deploy_cand_gpu.c; cudnn_tf32 is
# timed for the table only).
OTHERS = {'fp32': ['sparse_fp32', 'cudnn_fp32', 'cusparse'],
          'fp16': ['sparse_fp16', 'sparse_cb4', 'cudnn_fp16', 'cudnn_fp16_nhwc']}


def load(src):
    """The JSON summaries and params.txt of one seed_nets.sh output."""
    files = {}
    if os.path.isdir(src):
        for n in os.listdir(src):
            with open(os.path.join(src, n), 'rb') as f:
                files[n] = f.read()
    else:
        with tarfile.open(src) as t:
            for m in t.getmembers():
                if m.isfile():
                    files[os.path.basename(m.name)] = t.extractfile(m).read()
    out = {}
    for n in NAMES:
        if n + '.json' in files:
            out[n] = json.loads(files[n + '.json'])
        else:
            parts = [part(files, f'{n}-{p}.json') for p in ('fp16', 'fp32') if f'{n}-{p}.json' in files]
            parts = [x for x in parts if x]
            if parts:
                out[n] = merge_runs(parts)
    out['params'] = files.get('params.txt', b'').decode().strip()
    return out


def part(files, name):
    """One run's summary; a marker {"same_plan_as": RUN} (seed_nets.sh: the deploy with the
    activation-sparse candidates chose none, so its plan is the one without them) gives RUN's
    summary with every plan marked same_plan."""
    d = json.loads(files[name])
    if 'same_plan_as' not in d:
        return d
    src = files.get(d['same_plan_as'] + '.json')
    if src is None:
        return None
    d = json.loads(src)
    for p in d.get('plans', []):
        p['same_plan'] = True
    return d


def merge_runs(parts):
    """One deploy summary from the per-precision ones (the first is the base: engines, batch,
    CPU reference): plans appended, each layer's (and its batch1's) fields joined by name."""
    base = json.loads(json.dumps(parts[0]))
    byname = {lay['name']: lay for lay in base.get('layers', [])}
    for d in parts[1:]:
        base.setdefault('plans', []).extend(d.get('plans', []))
        base['dense_engine'] = base.get('dense_engine') or d.get('dense_engine', [])
        for lay in d.get('layers', []):
            mine = byname.get(lay['name'])
            if mine is None:
                base.setdefault('layers', []).append(lay)
                continue
            join_fields(mine, lay)
            join_fields(mine.setdefault('batch1', {}), lay.get('batch1', {}))
    return base


def join_fields(mine, other):
    """Fills mine's missing or null fields from other (a run of another precision leaves the
    fields of its precision null); failed_checks joined."""
    for k, v in other.items():
        if k == 'batch1':
            continue
        if k == 'failed_checks':
            mine[k] = sorted(set(mine.get(k) or []) | set(v or []))
        elif mine.get(k) is None:
            mine[k] = v


def num(x, fmt='{:.2f}'):
    return '-' if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def ratio(a, b):
    return a / b if a and b else None


def plan(d, prec):
    for p in (d or {}).get('plans', []):
        if p['precision'] == prec:
            return p
    return None


def plan_ms(d, prec, b1, dense=False):
    """A plan's time in ms at the batch (b1: at batch 1); dense: the all-dense network of the
    same run (for the fp32 plan: cuDNN per layer, TF32 off: the dense fp32 figure)."""
    p = plan(d, prec)
    if not p:
        return None
    pre = 'dense_' if dense else ''
    if b1:
        return p[pre + 'latency_ms_batch1']
    ips = p[pre + 'images_per_second']
    return d['batch'] * 1000.0 / ips if ips else None


def dense_fp32_ms(d, b1):
    return plan_ms(d, 'fp32', b1, dense=True)


def dense_fp32(w, wo, b1):
    """The dense fp32 yardstick and its name: the fp32 plan's all-dense network (cuDNN per
    layer, TF32 off) when a run made an fp32 plan, else the dense TF32 engine (deploy
    --precision fp16 --engine fp16,tf32), else None."""
    ms = dense_fp32_ms(w, b1) or dense_fp32_ms(wo, b1)
    if ms:
        return ms, 'dense fp32'
    e = dense_engine(w, 'tf32') or dense_engine(wo, 'tf32')
    return ((e['batch1_ms'] if b1 else e['batch_ms']), 'dense TF32 engine') if e else (None, 'dense fp32')


def training_table(nets):
    rows = ['| net | parameters (ours; PyTorch) | epochs | ours test top-1 | PyTorch test top-1 | '
            'ours s (its last call if resumed) | PyTorch s | 90% gmp test top-1 |', '|---|---|---|---|---|---|---|---|']
    for name, d in nets:
        t, p, pr = d.get('train', {}), d.get('train_pytorch', {}), d.get('prune', {})
        params = f"{t.get('parameters', '-')}; {p.get('parameters', '-')}"
        rows.append(f"| {name} | {params} | {t.get('epochs', p.get('epochs', '-'))} | "
                    f"{num(t.get('test_accuracy'))}% | {num(p.get('test_accuracy'))}% | "
                    f"{num(t.get('seconds'), '{:.0f}')} | {num(p.get('train_seconds'), '{:.0f}')} | "
                    f"{num(pr.get('test_accuracy'))}% |")
    return '\n'.join(rows)


def speed_rows(name, d, b1):
    w, wo = d.get('deploy_with'), d.get('deploy_without')
    e16 = dense_engine(w, 'fp16') or dense_engine(wo, 'fp16')
    e_ms = (e16['batch1_ms'] if b1 else e16['batch_ms']) if e16 else None
    f32, f32_name = dense_fp32(w, wo, b1)
    batch = 1 if b1 else (w or wo or {}).get('batch', '-')
    rows = []
    for label, src, prec in [('fp16 plan, with actsparse', w, 'fp16'), ('fp16 plan, without', wo, 'fp16'),
                             ('fp32 plan, with actsparse', w, 'fp32'), ('fp32 plan, without', wo, 'fp32')]:
        ms = plan_ms(src, prec, b1)
        if ms is None and prec == 'fp32':
            continue  # the runs made no fp32 plan (deploy --precision fp16)
        if (plan(src, prec) or {}).get('same_plan') and src is wo:
            label += ' (same plan: none chosen)'
        rows.append(f"| {name} | {batch} | {label} | {num(ms, '{:.3f}')} | {num(ratio(e_ms, ms))}x | "
                    f"{num(ratio(f32, ms))}x |")
    m = (w or wo or {}).get('mixed_fp16')
    if m:
        ms = m['batch1_ms'] if b1 else m['batch_ms']
        rows.append(f"| {name} | {batch} | mixed fp16 engine plan | {num(ms, '{:.3f}')} | "
                    f"{num(ratio(e_ms, ms))}x | {num(ratio(f32, ms))}x |")
    rows.append(f"| {name} | {batch} | (dense fp16 engine; {f32_name}) | {num(e_ms, '{:.3f}')}; "
                f"{num(f32, '{:.3f}')} | 1x | |")
    return rows


def speed_table(nets):
    rows = ['| net | batch | plan | ms | over dense fp16 engine | over dense fp32 (or TF32 engine) |',
            '|---|---|---|---|---|---|']
    for b1 in (False, True):
        for name, d in nets:
            rows += speed_rows(name, d, b1)
    return '\n'.join(rows)


def accuracy_table(nets):
    rows = ['| net | run | plan | deploy test top-1 | CPU reference top-1 (images) | same top-1 as CPU |',
            '|---|---|---|---|---|---|']
    for name, d in nets:
        for run in ('deploy_with', 'deploy_without'):
            r = d.get(run)
            if not r:
                continue
            for p in r.get('plans', []):
                ref = f"{num(r.get('cpu_reference_accuracy'))}% ({r.get('cpu_reference_images', 0)} of {r.get('test_images')})"
                if p.get('same_plan') and run == 'deploy_without':
                    continue  # the deploy_with row is this plan
                rows.append(f"| {name} | {run} | {p['precision']} | {num(p['test_accuracy'])}% | {ref} | "
                            f"{p['cpu_agreement_images']} of {p['cpu_compared_images']} |")
    return '\n'.join(rows)


def layer_rows(name, d):
    rows = []
    for lay in (d.get('deploy_with') or {}).get('layers', []):
        for b1, t in ((False, lay), (True, lay.get('batch1', {}))):
            for prec in ('fp32', 'fp16'):
                if t.get(f'chosen_{prec}') != f'actsparse_{prec}':
                    continue
                failed = set(t.get('failed_checks', []))
                rest = [(t.get(c + '_ms'), c) for c in OTHERS[prec] if c not in failed and t.get(c + '_ms')]
                ms = t.get(f'actsparse_{prec}_ms')
                best = min(rest) if rest else (None, '-')
                rows.append(f"| {name} | {lay['name']} | {1 if b1 else d['deploy_with']['batch']} | {prec} | "
                            f"{num(lay.get('act_sparsity'), '{:.2f}')} | {num(ms, '{:.4f}')} | "
                            f"{best[1]} {num(best[0], '{:.4f}')} | {num(ratio(best[0], ms))}x |")
    return rows


def layer_table(nets):
    rows = ['| net | layer | batch | precision | input zeros | actsparse ms | best other (ms) | speedup |',
            '|---|---|---|---|---|---|---|---|']
    body = [r for name, d in nets for r in layer_rows(name, d)]
    return '\n'.join(rows + (body or ['| (no layer chose an activation-sparse candidate) | | | | | | | |']))


def main(argv):
    if len(argv) < 2 or argv[1] in ('-h', '--help'):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    nets = []
    for src in argv[1:]:
        d = load(src)
        t = d.get('deploy_with') or d.get('deploy_without') or d.get('train') or {}
        nets.append((t.get('model', os.path.basename(src.rstrip('/'))), d))
    print('### Training (CIFAR-100, same recipe and epochs)\n')
    print(training_table(nets))
    params = [d['params'] for _, d in nets if d['params']]
    if params:
        print('\n' + '\n'.join(f'- {p}' for p in params))
    print('\n### End to end (ms per batch; speedup = baseline time / plan time)\n')
    print(speed_table(nets))
    print('\n### Accuracy against the CPU reference\n')
    print(accuracy_table(nets))
    print('\n### Layers where an activation-sparse candidate was chosen (deploy with actsparse)\n')
    print(layer_table(nets))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
