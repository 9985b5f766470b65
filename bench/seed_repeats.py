#!/usr/bin/env python3
"""The table of bench/seed_repeats.sh: per seed, the test (and validation) top-1 of `train`
and of the PyTorch reference, then each one's mean and sample standard deviation over the
seeds both finished, and the difference of the means with its standard error.

usage: seed_repeats.py NET JSON_DIR     (JSON_DIR holds ours-S.json and torch-S.json)
"""
import glob, math, os, re, sys

from tablelib import load


def load_runs(d, tool):
    """{seed: summary} of one tool's finished runs (unreadable ones left out)."""
    runs = {}
    for p in glob.glob(os.path.join(d, tool + '-*.json')):
        m, r = re.search(r'-(\d+)\.json$', p), load(p)
        if m and r:
            runs[int(m.group(1))] = r
    return runs


def mean_sd(xs):
    """Mean and sample standard deviation (0 for one value)."""
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    net, d = sys.argv[1], sys.argv[2]
    ours, torch = load_runs(d, 'ours'), load_runs(d, 'torch')
    print(f'### {net}: `train` against PyTorch, same recipe, one run per seed\n')
    print('| seed | ours test (val) | ours s | PyTorch test (val) | PyTorch s |')
    print('|---|---|---|---|---|')
    cell = lambda r: f"{r['test_accuracy']:.2f}% ({r['val_accuracy']:.2f}%)"
    for s in sorted(set(ours) | set(torch)):
        o, t = ours.get(s), torch.get(s)
        print(f"| {s} | {cell(o)} | {o['seconds']:.0f} |" if o else f'| {s} | - | - |', end='')
        print(f" {cell(t)} | {t['train_seconds']:.0f} |" if t else ' - | - |')
    both = sorted(set(ours) & set(torch))
    print()
    if not both:
        print('No seed finished by both yet.')
        return
    a, b = [ours[s]['test_accuracy'] for s in both], [torch[s]['test_accuracy'] for s in both]
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    se = math.sqrt((sa ** 2 + sb ** 2) / len(both)) if len(both) > 1 else float('nan')
    print(f'Seeds finished by both: {len(both)} ({", ".join(map(str, both))}). Test top-1 mean (sd): '
          f'ours {ma:.2f}% ({sa:.2f}), PyTorch {mb:.2f}% ({sb:.2f}); ours - PyTorch {ma - mb:+.2f} points '
          f'(standard error {se:.2f}). Validation figures are each tool\'s own seeded 5,000-image split '
          f'and do not compare across the two.')


if __name__ == '__main__':
    main()
