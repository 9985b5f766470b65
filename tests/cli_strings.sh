#!/usr/bin/env bash
# String types of the files the tools write: a model, a quantized model and
# an export hold only fixed-length strings (H5Tis_variable_str false on every
# string attribute and dataset), and files of earlier versions, whose strings
# are variable-length, still load: with their checksum block (read after it
# verified) and without one (with the notice), giving the same decoded
# weights as the fixed-length files.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
TR="$BIN/train --device cpu --quiet"
H=${BIN%/bin}/helpers
STR=$H/h5strings
DEC=$H/export_decode

# A tiny CIFAR-100 folder (40 train, 20 test images) cut from the synthetic set.
$TR --data-dir "$T/data" --model no-such-model synthetic -o "$T/x.h5" >/dev/null 2>&1
mkdir -p "$T/tiny"
head -c $((40 * 3074)) "$T/data/synthetic/train.bin" >"$T/tiny/train.bin"
head -c $((20 * 3074)) "$T/data/synthetic/test.bin" >"$T/tiny/test.bin"
$TR --model tests/fuzz/corpus/fuzz_desc/tiny.txt --epochs 1 --batch 8 --val-size 8 "$T/tiny" \
    -o "$T/m.h5" >/dev/null 2>&1 || bad "tiny model" "train failed"
$BIN/quantize --device cpu --quiet --centroids 4 --kmeans-weight none --batch 8 "$T/m.h5" \
    -o "$T/q.h5" >/dev/null 2>&1 || bad "tiny quantized model" "quantize failed"
$BIN/export --quiet "$T/q.h5" -o "$T/e.h5" >/dev/null 2>&1 || bad "tiny export" "export failed"
$BIN/export --quiet "$T/m.h5" -o "$T/me.h5" >/dev/null 2>&1 || bad "tiny fp32 export" "export failed"

# --- written files hold fixed-length strings only ---------------------------------
for f in m q e; do
    out=$($STR count "$T/$f.h5" 2>&1)
    if grep -qE '^[1-9][0-9]* strings, 0 variable-length$' <<<"$out"; then ok "$f.h5: $out"
    else bad "$f.h5 has no variable-length string" "$out"; fi
done

# same_decode NAME EXPORT WANT: the export's decoded weights equal file WANT's.
same_decode() {
    if "$DEC" "$2" >"$T/got.txt" 2>"$T/err.txt" && cmp -s "$T/got.txt" "$3"; then ok "$1"
    else bad "$1" "$(head -c 300 "$T/err.txt")"; fi
}
"$DEC" "$T/e.h5" >"$T/e.txt" && "$DEC" "$T/me.h5" >"$T/me.txt" || bad "decode" "export_decode failed"

# older_file KIND SRC DST: DST = SRC with every string variable-length
# (sealed: checksum block kept and re-sealed; unsealed: no block at all).
older_file() {
    if [ "$1" = unsealed ]; then $STR unsealed "$2" "$3" || return 1; else cp "$2" "$3"; fi
    $STR vlen "$3" >/dev/null || return 1
    $STR count "$3" | grep -qE '^([1-9][0-9]*) strings, \1 variable-length$'
}

# loads NAME WANT_NOTICE CMD...: CMD succeeds; its stderr has the no-checksum
# notice exactly when WANT_NOTICE is 1.
loads() {
    local name=$1 notice=$2; shift 2
    local err rc
    err=$("$@" 2>&1 >/dev/null); rc=$?
    local has=0; grep -q 'notice: .*has no checksum' <<<"$err" && has=1
    if [ $rc -eq 0 ] && [ $has -eq "$notice" ]; then ok "$name"
    else bad "$name" "exit $rc, notice $has (want $notice): $err"; fi
}

# --- files of earlier versions: variable-length strings, with and without a checksum
for kind in sealed unsealed; do
    notice=$([ $kind = unsealed ] && echo 1 || echo 0)
    if older_file $kind "$T/m.h5" "$T/m_$kind.h5"; then
        loads "$kind variable-length model loads (export)" $notice $BIN/export --quiet "$T/m_$kind.h5" -o "$T/me_$kind.h5"
        same_decode "$kind variable-length model: same weights" "$T/me_$kind.h5" "$T/me.txt"
        loads "$kind variable-length model loads (quantize)" $notice $BIN/quantize --device cpu --quiet --bits 8 \
            --batch 8 "$T/m_$kind.h5" -o "$T/mq_$kind.h5"
    else
        bad "$kind variable-length model" "could not build it"
    fi
    if older_file $kind "$T/q.h5" "$T/q_$kind.h5"; then
        loads "$kind variable-length quantized model loads (export)" $notice $BIN/export --quiet "$T/q_$kind.h5" -o "$T/qe_$kind.h5"
        same_decode "$kind variable-length quantized model: same codebooks" "$T/qe_$kind.h5" "$T/e.txt"
    else
        bad "$kind variable-length quantized model" "could not build it"
    fi
    if older_file $kind "$T/e.h5" "$T/e_$kind.h5"; then
        same_decode "$kind variable-length export loads" "$T/e_$kind.h5" "$T/e.txt"
        loads "$kind variable-length export deploys (CPU)" $notice $BIN/deploy --device cpu --quiet --chart none --runs "$T/runs" \
            "$T/e_$kind.h5" "$T/tiny"
    else
        bad "$kind variable-length export" "could not build it"
    fi
done
summary
