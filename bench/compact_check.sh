#!/usr/bin/env bash
# Issue 18 (compact model files) on the GPU machine: every MODEL (a pruned or
# quantized model file) is exported by a build of main (export format 1,
# OLD_BIN) and by this build (format 2), both files are deployed with
# --reference all, and one line per model gives the file bytes of each, the
# ratio of the new file to the dense fp32 weights, the test accuracy of every
# GPU plan and of the CPU reference for both files (they must be equal), and
# the load time of the new file.
#
#     bench/compact_check.sh OLD_BIN MODEL...     # e.g. /tmp/main/build/bin /root/pipe/r18-95-k16.h5
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1; shift
DEPLOY_ARGS=${DEPLOY_ARGS:-}  # e.g. "--data-dir DIR"
out=${OUT:-bench/out}/compact
mkdir -p "$out"
for m in "$@"; do
    n=$(basename "$m" .h5)
    "$OLD/export" --quiet "$m" -o "$out/$n.v1.csr.h5" >/dev/null
    build/bin/export --quiet "$m" -o "$out/$n.v2.csr.h5" --json "$out/$n.export.json" >"$out/$n.export.txt"
    "$OLD/deploy" --quiet $DEPLOY_ARGS "$out/$n.v1.csr.h5" --reference all --chart none --json "$out/$n.v1.json" >"$out/$n.v1.txt"
    build/bin/deploy --quiet $DEPLOY_ARGS "$out/$n.v2.csr.h5" --reference all --chart none --json "$out/$n.v2.json" >"$out/$n.v2.txt"
    python3 - "$out/$n" <<'PY'
import json, os, sys
p = sys.argv[1]
e, a, b = (json.load(open(p + s)) for s in (".export.json", ".v1.json", ".v2.json"))
acc = lambda d: " ".join(f"{q['precision']} {q['test_accuracy']:.2f}" for q in d.get("plans", []))
same = all(x.get("test_accuracy") == y.get("test_accuracy") for x, y in zip(a.get("plans", []), b.get("plans", []))) \
    and a.get("test_accuracy") == b.get("test_accuracy") and a.get("cpu_reference_accuracy") == b.get("cpu_reference_accuracy")
print(f"{os.path.basename(p)}: v1 {os.path.getsize(p + '.v1.csr.h5')} B, v2 {e['file_bytes']} B = 1/"
      f"{e['dense_fp32_bytes'] / e['file_bytes']:.1f} of dense {e['dense_fp32_bytes']} B; "
      f"v1 [{acc(a)} cpu {a.get('cpu_reference_accuracy')}] v2 [{acc(b)} cpu {b.get('cpu_reference_accuracy')}] "
      f"{'SAME' if same else 'DIFFERENT'}; load {b['load_seconds']:.3f} s")
PY
done | tee -a "$out/summary.txt"
