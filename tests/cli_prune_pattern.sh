#!/usr/bin/env bash
# CLI tests of `prune --pattern` on synthetic data on the CPU (lenet): bad
# pattern strings give one line and exit 2; the default and `--pattern
# unstructured` give the same bits; evolve, gmp and oneshot end with every
# mask on its pattern (checked here from the model file with h5dump and awk,
# independently of the C code: every KxC block all kept or all pruned, at most
# N kept per N:M group), the file records the pattern, a stopped and resumed
# run keeps it bitwise; per-layer patterns (PREFIX=P,...) put each layer on its
# own pattern, checked the same way, and export writes BSR only for the block
# layers; re-pruning an unstructured model onto a pattern keeps
# its sparsity and reports the cost; quantize keeps masks and pattern.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
PR="$BIN/prune --device cpu --quiet --data-dir $T/data --runs $T/runs"
TINY="--model lenet --population 3 --iterations 4 --batches 2 --batch 32 --val-size 200 --scan-images 64 --target-sparsity 0.8"

# pattern_off FILE PATTERN [LAYER...]: weights of the file's pruned layers (or
# the LAYERs) off PATTERN
# (KxC with K, C narrowed to the gcd with the layer's channels; KxC+F: the
# weights outside whole blocks past floor(F x kept); N:M on layers whose C is a
# multiple of M), from h5dump's text of /masks.
pattern_off() {
    local f=$1 p=$2 total=0 name layers=(conv2 fc1 fc2 fc3)
    [ $# -gt 2 ] && layers=("${@:3}")
    for name in "${layers[@]}"; do
        local n
        n=$(h5dump -y -w 0 -d "/masks/$name.weight" "$f" | awk -v pat="$p" '
            function gcd(a, b) { while (b) { t = a % b; a = b; b = t } return a }
            /DATASPACE/ { s = $0; sub(/.*\( */, "", s); sub(/ *\).*/, "", s); nd = split(s, d, / *, */) }
            /DATA \{/ { on = 1; next }
            on && /}/ { on = 0 }
            on { gsub(/,/, " "); for (i = 1; i <= NF; i++) v[n++] = $i }
            END {
                K = d[1]; C = d[2]; RS = nd == 4 ? d[3] * d[4] : 1; bad = 0
                if (pat ~ /:/) {
                    split(pat, q, ":"); N = q[1]; M = q[2]
                    if (C % M) { print 0; exit }
                    for (k = 0; k < K; k++) for (rs = 0; rs < RS; rs++) for (c0 = 0; c0 < C; c0 += M) {
                        kept = 0
                        for (c = c0; c < c0 + M; c++) kept += v[(k * C + c) * RS + rs] != 0
                        if (kept > N) bad += kept - N
                    }
                } else {
                    F = 0; if (split(pat, h, "+") == 2) F = h[2] + 0
                    split(h[1], q, "x"); kb = gcd(K, q[1]); cb = gcd(C, q[2]); all = 0
                    for (k0 = 0; k0 < K; k0 += kb) for (c0 = 0; c0 < C; c0 += cb) for (rs = 0; rs < RS; rs++) {
                        kept = 0
                        for (k = k0; k < k0 + kb; k++) for (c = c0; c < c0 + cb; c++) kept += v[(k * C + c) * RS + rs] != 0
                        if (kept && kept < kb * cb) bad += kept
                        all += kept
                    }
                    if (F > 0) { most = int(F * all + 1e-9); bad = bad > most ? bad - most : 0 }
                }
                print bad
            }')
        total=$((total + ${n:-999999}))
    done
    echo "$total"
}

# attr_pattern FILE: the file's root attribute `pattern` ("" when absent).
attr_pattern() { h5dump -a /pattern "$1" 2>/dev/null | sed -n 's/.*(0): "\(.*\)".*/\1/p'; }

# json_num FILE KEY: the first number of "KEY" in a JSON file.
json_num() { grep -oE "\"$2\": *-?[0-9.e+-]+" "$1" | head -n 1 | sed -E 's/.*: *//'; }

# --- bad usage (exit 2) ---------------------------------------------------------
for p in 8x 16x8x2 0x4 1x1 2:2 4:2 2:4:8 abc x8 "8 x1" 16x8+0 16x8+1 2:4+0.2 16x8+; do
    expect_fail "bad pattern '$p'" 2 "^prune: --pattern: .*\\(${p//+/\\+}\\)" $PR --pattern "$p" synthetic
done

# --- unstructured is the default, bit for bit -------------------------------------
$PR $TINY --method gmp -o "$T/u0.h5" synthetic >/dev/null 2>&1 || bad "gmp default" "failed"
$PR $TINY --method gmp --pattern unstructured -o "$T/u1.h5" synthetic >/dev/null 2>&1 || bad "gmp unstructured" "failed"
if h5diff -q "$T/u0.h5" "$T/u1.h5" /params /params && h5diff -q "$T/u0.h5" "$T/u1.h5" /masks /masks
then ok "--pattern unstructured == default"; else bad "--pattern unstructured == default" "files differ"; fi
[ -z "$(attr_pattern "$T/u0.h5")" ] && ok "no pattern attribute when unstructured" || bad "no pattern attribute" "$(attr_pattern "$T/u0.h5")"
n=$(pattern_off "$T/u0.h5" 4x2)
[ "$n" -gt 0 ] && ok "the checker sees an unstructured mask off 4x2 ($n)" || bad "checker" "unstructured mask on 4x2"
n=$(pattern_off "$T/u0.h5" 2:4)
[ "$n" -gt 0 ] && ok "the checker sees an unstructured mask off 2:4 ($n)" || bad "checker" "unstructured mask on 2:4"

# --- every method on its pattern --------------------------------------------------
for mp in "gmp 2:4" "oneshot 8x1" "gmp 16x8"; do
    set -- $mp
    $PR $TINY --method "$1" --pattern "$2" -o "$T/$1-$2.h5" --json "$T/$1-$2.json" synthetic >"$T/$1-$2.out" 2>&1 \
        || bad "$1 $2" "failed: $(tail -n 2 "$T/$1-$2.out")"
    off=$(pattern_off "$T/$1-$2.h5" "$2"); sp=$(json_num "$T/$1-$2.json" sparsity)
    [ "$off" = 0 ] && ok "$1 --pattern $2: masks on the pattern" || bad "$1 --pattern $2 on the pattern" "$off weights off"
    awk -v s="${sp:-0}" 'BEGIN { exit !(s >= 0.7995 && s < 0.82) }' && ok "$1 --pattern $2: sparsity $sp" || bad "$1 $2 sparsity" "${sp:-?}"
    [ "$(attr_pattern "$T/$1-$2.h5")" = "$2" ] && ok "$1 $2: file records the pattern" || bad "$1 $2 attribute" "$(attr_pattern "$T/$1-$2.h5")"
done
grep -qE 'fc1.weight .*8x8\* [0-9]+/750 blocks' "$T/gmp-16x8.out" && grep -qE 'fc3.weight .*2x4\* [0-9]+/105 blocks' "$T/gmp-16x8.out" \
    && ok "table counts blocks (fc3 falls back to 2x4)" || bad "table counts blocks" "$(grep -E 'fc[13]' "$T/gmp-16x8.out")"
grep -q '"blocks_kept"' "$T/gmp-16x8.json" && grep -q '"pattern": *"2x4"' "$T/gmp-16x8.json" \
    && ok "json counts blocks" || bad "json counts blocks" "no blocks_kept"
v=$("${PY:-/usr/bin/python3}" -c "import json,sys
L=[l for l in json.load(open(sys.argv[1]))['layers'] if 'blocks_kept_row_max' in l]
def rows(l): return int(l['shape'].split('x')[0]) // int(l['pattern'].split('x')[0])
print(len(L) > 0 and all(l['blocks_kept'] <= rows(l) * l['blocks_kept_row_max'] and l['blocks_kept_row_max'] <= l['blocks_kept'] and l['blocks_kept_row_max'] <= l['blocks'] // rows(l) for l in L))" "$T/gmp-16x8.json" 2>&1)
[ "$v" = True ] && ok "json: the busiest block row between the mean and a full row" || bad "json blocks_kept_row_max" "$v"

# --- the hybrid KxC+F: blocks and at most a share F of single weights ----------------------
$PR $TINY --method gmp --pattern 4x2+0.25 -o "$T/h.h5" --json "$T/h.json" synthetic >"$T/h.out" 2>&1 \
    || bad "gmp 4x2+0.25" "failed: $(tail -n 2 "$T/h.out")"
off=$(pattern_off "$T/h.h5" 4x2+0.25); strict=$(pattern_off "$T/h.h5" 4x2)
[ "$off" = 0 ] && [ "${strict:-0}" -gt 0 ] && ok "gmp --pattern 4x2+0.25: singles within the share ($strict outside whole blocks)" \
    || bad "gmp 4x2+0.25 on the pattern" "$off past the share, $strict singles"
[ "$(attr_pattern "$T/h.h5")" = 4x2+0.25 ] && ok "4x2+0.25: file records the pattern" || bad "4x2+0.25 attribute" "$(attr_pattern "$T/h.h5")"
n=$(grep -oE '"singles": *[0-9]+' "$T/h.json" | awk -F: '{ s += $2 } END { print s + 0 }')
[ "$n" = "$strict" ] && grep -qE 'fc1.weight .*4x2\+0\.25 [0-9]+/6000 blocks, [0-9]+ singles' "$T/h.out" \
    && ok "table and json count the singles ($n)" || bad "singles reported" "json $n, checker $strict"
$BIN/export "$T/h.h5" -o "$T/h.csr.h5" >"$T/hx.out" 2>&1 || bad "export 4x2+0.25" "failed: $(tail -n 2 "$T/hx.out")"
! grep -q '^export: layer' "$T/hx.out" && grep -qE '^fc1 .* bsr 4x2\+rem' "$T/hx.out" \
    && ok "export stores hybrid layers as BSR blocks plus a remainder" || bad "export hybrid" "$(head -n 12 "$T/hx.out")"
h5dump -a /format_version "$T/h.csr.h5" 2>/dev/null | grep -q '(0): 4' && ok "hybrid export: format version 4" \
    || bad "hybrid format version" "$(h5dump -a /format_version "$T/h.csr.h5" 2>&1 | tail -n 3)"
py_check "python reads the hybrid export (blocks + remainder)" "$T/h.csr.h5" "$T/h.h5"
$BIN/quantize --device cpu --quiet --data-dir "$T/data" --centroids 16 --kmeans-weight none \
    -o "$T/hq.h5" "$T/h.h5" >/dev/null 2>&1 && $BIN/export --quiet "$T/hq.h5" -o "$T/hq.csr.h5" \
    || bad "quantize + export 4x2+0.25" "failed"
py_check "python reads the hybrid codebook export (the remainder's 4-bit codes)" "$T/hq.csr.h5" "$T/hq.h5"

expect_fail "no latency objective with a hybrid pattern" 2 '^prune: --objective latency: the latency tables do not time hybrid layers \(pattern 4x2\+0\.25\)' \
    $PR $TINY --objective latency --pattern 4x2+0.25 synthetic

# --- evolve: stopped and resumed == uninterrupted, pattern kept -----------------------
ARGS="$TINY --pattern 4x2 --finetune 1 --seed 3"
$PR $ARGS -o "$T/a.h5" --json "$T/a.json" synthetic >/dev/null 2>&1 || bad "evolve 4x2" "failed"
$PR $ARGS -o "$T/b.h5" --stop-after 2 synthetic >/dev/null 2>&1 || bad "evolve 4x2 stopped" "failed"
$BIN/prune --device cpu --quiet --data-dir "$T/data" --resume -o "$T/b.h5" >/dev/null 2>&1 || bad "evolve 4x2 resume" "failed"
off=$(pattern_off "$T/a.h5" 4x2)
[ "$off" = 0 ] && ok "evolve --pattern 4x2: masks on the pattern" || bad "evolve 4x2 on the pattern" "$off weights off"
if h5diff -q "$T/a.h5" "$T/b.h5" /params /params && h5diff -q "$T/a.h5" "$T/b.h5" /masks /masks \
   && [ "$(attr_pattern "$T/b.h5")" = 4x2 ]; then ok "resumed evolve 4x2 is bitwise equal, pattern kept"
else bad "resumed evolve 4x2" "differs or lost the pattern ($(attr_pattern "$T/b.h5"))"; fi

# --- re-pruning an unstructured model onto a pattern ------------------------------------
expect_fail "re-prune target below the model's" 2 '^prune: --target-sparsity 0.5: below' \
    $PR --from "$T/u0.h5" --pattern 4x2 --method oneshot --target-sparsity 0.5 --batch 32 synthetic
$PR --from "$T/u0.h5" --pattern 4x2 --method oneshot --epochs 0.1 --batches 2 --batch 32 -o "$T/r.h5" \
    --json "$T/r.json" synthetic >"$T/r.out" 2>&1 || bad "re-prune" "failed: $(tail -n 2 "$T/r.out")"
off=$(pattern_off "$T/r.h5" 4x2); s0=$(json_num "$T/r.json" sparsity_before); s1=$(json_num "$T/r.json" sparsity)
[ "$off" = 0 ] && ok "re-pruned onto 4x2" || bad "re-pruned onto 4x2" "$off weights off"
awk -v a="${s0:-0}" -v b="${s1:-0}" 'BEGIN { exit !(a > 0.79 && b >= a && b < a + 0.01) }' \
    && ok "re-pruning keeps the sparsity ($s0 -> $s1)" || bad "re-pruning keeps the sparsity" "${s0:-?} -> ${s1:-?}"
for k in val_accuracy_before val_accuracy_projected weights_off_pattern_before; do
    grep -q "\"$k\"" "$T/r.json" || bad "re-prune json has $k" "missing"
done
grep -qE '^re-pruned onto 4x2: val [0-9.]+% \(start.*-> [0-9.]+% \(projected.*-> [0-9.]+% \(fine-tuned' "$T/r.out" \
    && ok "re-pruning reports its cost" || bad "re-pruning reports its cost" "$(grep re-pruned "$T/r.out")"

# --- per-layer patterns ---------------------------------------------------------------------
for p in "fc=4x2,2:4,16x8" "fc1=4x2,fc1=2:4" "=4x2" "fc1=" "fc1=4x2,"; do
    expect_fail "bad per-layer pattern '$p'" 2 '^prune: --pattern: ' $PR --pattern "$p" synthetic
done
expect_fail "a prefix that names no layer" 2 "^prune: --pattern: prefix 'conv9' matches no prunable layer" \
    $PR $TINY --method gmp --pattern "conv9=4x2" synthetic
$PR $TINY --method gmp --pattern "fc=4x2,fc3=unstructured,fc2=2:4" -o "$T/pl.h5" --json "$T/pl.json" synthetic \
    >"$T/pl.out" 2>&1 || bad "gmp per-layer" "failed: $(tail -n 2 "$T/pl.out")"
offb=$(pattern_off "$T/pl.h5" 4x2 fc1); offn=$(pattern_off "$T/pl.h5" 2:4 fc2); offu=$(pattern_off "$T/pl.h5" 4x2 fc3 conv2)
[ "$offb" = 0 ] && [ "$offn" = 0 ] && [ "$offu" -gt 0 ] \
    && ok "per-layer pattern: fc1 on 4x2, fc2 on 2:4, fc3 (a longer prefix) and conv2 (none) unstructured" \
    || bad "per-layer pattern on the masks" "fc1 $offb off 4x2, fc2 $offn off 2:4, fc3 and conv2 $offu off 4x2"
[ "$(attr_pattern "$T/pl.h5")" = "fc=4x2,fc3=unstructured,fc2=2:4" ] && ok "per-layer: file records the pattern" \
    || bad "per-layer attribute" "$(attr_pattern "$T/pl.h5")"
PLA="$TINY --pattern fc=4x2,fc3=unstructured --finetune 1 --seed 3"
$PR $PLA -o "$T/pla.h5" synthetic >/dev/null 2>&1 && $PR $PLA --stop-after 2 -o "$T/plb.h5" synthetic >/dev/null 2>&1 \
    && $BIN/prune --device cpu --quiet --data-dir "$T/data" --resume -o "$T/plb.h5" >/dev/null 2>&1 \
    && h5diff -q "$T/pla.h5" "$T/plb.h5" /masks /masks && h5diff -q "$T/pla.h5" "$T/plb.h5" /params /params \
    && ok "per-layer pattern: a stopped and resumed run gives the same bits" || bad "per-layer resume" "differs or failed"
$BIN/export --quiet -o "$T/pl.sparse.h5" "$T/pl.h5" >"$T/ple.out" 2>&1 || bad "export per-layer" "$(tail -n 2 "$T/ple.out")"
enc=$(for l in fc1 fc2 fc3; do h5dump -a "/layers/$l/encoding-type" "$T/pl.sparse.h5" 2>/dev/null | sed -n 's/.*(0): "\(.*\)".*/\1/p'; done | tr '\n' ' ')
[ "$enc" = "bsr_matrix csr_matrix csr_matrix " ] && ok "per-layer export: BSR for the block layer only" \
    || bad "per-layer export encodings" "$enc"

# --- quantize keeps the pattern ------------------------------------------------------------
$BIN/quantize --device cpu --quiet --data-dir "$T/data" --centroids 16 --kmeans-weight none \
    -o "$T/q.h5" "$T/gmp-16x8.h5" >/dev/null 2>&1 || bad "quantize" "failed"
off=$(pattern_off "$T/q.h5" 16x8)
if [ "$off" = 0 ] && h5diff -q "$T/gmp-16x8.h5" "$T/q.h5" /masks /masks && [ "$(attr_pattern "$T/q.h5")" = 16x8 ]
then ok "quantize keeps masks and pattern"; else bad "quantize keeps the pattern" "$off off, attribute '$(attr_pattern "$T/q.h5")'"; fi
summary
