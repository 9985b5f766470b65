#!/usr/bin/env bash
# CLI tests of the block-pattern pipeline on a tiny net and synthetic data on
# the CPU: prune --pattern 16x8 and 8x1, quantize (k-means --centroids 16
# with and without fine-tuning, --row-scale, linear --bits 8, --half; on
# 600 training and 300 test images to keep it short) keeps
# every mask exactly, revives no pruned weight and carries the pattern
# attribute; export writes the block layers as scipy BSR (format_version 3,
# layout and blocksize in --json) and --bsr off the same model as CSR
# (version 2); the documented h5py + scipy reader (tests/export_check.py)
# reads both, equal to the toolkit's decode bit for bit; deploy --device cpu
# gives the same accuracies for both exports. Prints the file sizes.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
PR="$BIN/prune --device cpu --quiet --data-dir $T/data --runs $T/runs"
QU="$BIN/quantize --device cpu --quiet --data-dir $T/data --dataset $T/small --batch 64 --kmeans-weight none --bn-recalibrate 2"
EX="$BIN/export -q"
DP="$BIN/deploy --device cpu --quiet --data-dir $T/data --chart none --test-images 300"
PY=/usr/bin/python3

# values FILE DSET: the numbers of a dataset, one a line (h5dump's DATA block).
values() {
    h5dump -y -w 0 -d "$2" "$1" | awk '/DATA \{/ { on = 1; next } on && /}/ { on = 0 }
        on { gsub(/,/, " "); for (i = 1; i <= NF; i++) print $i }'
}

# revived FILE: weights of the file whose mask is 0 but whose value is not.
revived() {
    local f=$1 total=0 name n
    for name in $(h5ls "$f/masks" | awk '{ print $1 }'); do
        n=$(paste <(values "$f" "/masks/$name") <(values "$f" "/params/$name") \
            | awk '$1 == 0 && $2 != 0 { n++ } END { print n + 0 }')
        total=$((total + n))
    done
    echo "$total"
}

# attr_pattern FILE: the file's root attribute `pattern` ("" when absent).
attr_pattern() { h5dump -a /pattern "$1" 2>/dev/null | sed -n 's/.*(0): "\(.*\)".*/\1/p'; }

# version FILE: the export file's format_version.
version() { h5dump -a /format_version "$1" 2>/dev/null | sed -n 's/.*(0): \([0-9]*\).*/\1/p'; }

# json_str FILE KEY: the first string value of "KEY" in a JSON file.
json_str() { grep -oE "\"$2\": *\"[^\"]*\"" "$1" | head -n 1 | sed -E 's/.*: *"//; s/"$//'; }

# A tiny net whose channels take 16x8 and 8x1 unchanged (the stem, 3 input
# channels, is never pruned; the head of 10 classes narrows the blocks).
cat >"$T/tiny.txt" <<'EOF'
conv 16 3 pad=1 bias=0 name=conv1
bn name=bn1
relu name=relu1
maxpool 2 name=pool1
conv 16 3 pad=1 bias=0 name=c2
bn name=bn2
relu name=relu2
conv 32 3 stride=2 pad=1 bias=0 name=c3
bn name=bn3
relu name=relu3
gap name=gap
linear classes name=fc
EOF
TINY="--model $T/tiny.txt --method gmp --population 1 --iterations 3 --batches 2 --batch 32 --val-size 200 --scan-images 0 --target-sparsity 0.8"

for pat in 16x8 8x1; do
    P=$T/p$pat.h5
    $PR $TINY --pattern $pat -o "$P" synthetic >"$T/prune.out" 2>&1 || bad "prune $pat" "$(tail -n 2 "$T/prune.out")"
    if [ ! -d "$T/small" ]; then  # quantize's evaluations and fine-tuning on 600 + 300 of the images
        mkdir "$T/small"
        head -c $((3074 * 600)) "$T/data/synthetic/train.bin" >"$T/small/train.bin"
        head -c $((3074 * 300)) "$T/data/synthetic/test.bin" >"$T/small/test.bin"
    fi
    [ "$(attr_pattern "$P")" = $pat ] && ok "prune $pat: the model records the pattern" || bad "prune $pat attribute" "$(attr_pattern "$P")"

    # --- quantize keeps every mask, revives nothing, carries the pattern ---------------
    for q in "centroids --centroids 16" "finetune --centroids 16 --finetune-epochs 1 --finetune-lr-params 0.01" \
             "rowscale --centroids 16 --row-scale" "bits8 --bits 8" "half --half"; do
        set -- $q; name=$1; shift
        Q=$T/q$pat-$name.h5
        $QU "$@" "$P" -o "$Q" >"$T/q.out" 2>&1 || { bad "quantize $pat $name" "$(tail -n 2 "$T/q.out")"; continue; }
        n=$(revived "$Q")
        if h5diff -q "$P" "$Q" /masks /masks && [ "$n" = 0 ] && [ "$(attr_pattern "$Q")" = $pat ]
        then ok "quantize $name on $pat: masks equal, no weight revived, pattern kept"
        else bad "quantize $name on $pat" "$n revived, pattern '$(attr_pattern "$Q")', masks $(h5diff -q "$P" "$Q" /masks /masks >/dev/null && echo equal || echo differ)"; fi
    done

    # --- export: BSR (auto) and CSR (--bsr off) of the same models ------------------------
    for src in "fp32 $P" "codebook4 $T/q$pat-centroids.h5"; do
        set -- $src; vt=$1; M=$2
        B=$T/b$pat-$vt.h5; C=$T/c$pat-$vt.h5
        $EX "$M" -o "$B" --json "$T/b.json" >/dev/null 2>"$T/err" || bad "export $pat $vt" "$(cat "$T/err")"
        $EX --bsr off "$M" -o "$C" --json "$T/c.json" >/dev/null 2>&1 || bad "export --bsr off $pat $vt" "failed"
        want_c2=$([ $pat = 16x8 ] && echo 16,8 || echo 8,1)
        if [ "$(version "$B")" = 3 ] && [ "$(version "$C")" = 2 ] && [ "$(json_str "$T/b.json" values)" = $vt ] \
           && grep -qE '"bsr_layers": *4' "$T/b.json" && grep -qE '"bsr_layers": *0' "$T/c.json" \
           && tr -d ' \n' <"$T/b.json" | grep -qE "\"name\":\"c2\",\"kind\":\"conv\",\"values\":\"$vt\",\"layout\":\"bsr\",\"blocksize\":\\[$want_c2\\]" \
           && [ ! -s "$T/err" ]
        then ok "export $pat $vt: every layer BSR (c2 blocks $want_c2), version 3; --bsr off: CSR, version 2"
        else bad "export $pat $vt" "versions $(version "$B")/$(version "$C"); $(cat "$T/err"; head -c 600 "$T/b.json")"; fi
        py_check "python reads the BSR export $pat $vt" "$B" "$M"
        py_check "python reads the CSR export $pat $vt" "$C" "$M"
        echo "  sizes $pat $vt: BSR $(stat -c %s "$B") bytes, CSR $(stat -c %s "$C") bytes"
        if [ $pat = 16x8 ]; then
            [ "$(stat -c %s "$B")" -lt "$(stat -c %s "$C")" ] && ok "16x8 $vt: BSR file smaller than CSR" \
                || bad "16x8 $vt: BSR file smaller than CSR" "$(stat -c %s "$B") vs $(stat -c %s "$C")"
        fi

        # --- deploy --device cpu runs both the same ------------------------------------------
        $DP "$B" synthetic --json "$T/db.json" >/dev/null 2>"$T/err" || bad "deploy BSR $pat $vt" "$(cat "$T/err")"
        $DP "$C" synthetic --json "$T/dc.json" >/dev/null 2>&1 || bad "deploy CSR $pat $vt" "failed"
        ab=$(grep -oE '"(test_accuracy|cpu_reference_accuracy)": *[0-9.e+-]+' "$T/db.json")
        ac=$(grep -oE '"(test_accuracy|cpu_reference_accuracy)": *[0-9.e+-]+' "$T/dc.json")
        [ -n "$ab" ] && [ "$ab" = "$ac" ] && ok "deploy cpu $pat $vt: BSR and CSR exports give the same accuracies" \
            || bad "deploy cpu $pat $vt" "BSR: $ab; CSR: $ac"
    done
done
summary
