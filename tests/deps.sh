#!/usr/bin/env bash
# The dependency direction, enforced: kernels <- runtime <- {datasets, train,
# prune, quantize, export} <- the tools. A file may include headers of its
# own folder and of lower layers only; a tool's main (<dir>/<tool>_main.c,
# the Makefile's convention) is the top layer wherever it lives; kernels/
# includes no HDF5 or GSL header. Also checks that the checker catches a
# planted upward include.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh

# Known upward includes still to be removed, "file:header" each. Keep this
# list empty: an entry is a debt, not a permission.
ALLOW_UPWARD=()

# Layer of a top-level folder (empty: not a library layer).
layer_of() {
    case $1 in
    kernels) echo 0 ;;
    runtime) echo 1 ;;
    datasets | train | prune | quantize | export) echo 2 ;;
    *) echo "" ;;
    esac
}

# Whether "file:header" is on the allow-list.
allowed() {
    local e
    for e in "${ALLOW_UPWARD[@]}"; do [ "$e" = "$1" ] && return 0; done
    return 1
}

# Prints one line per forbidden include under root $1; returns 1 when any.
deps_check() {
    local root=$1 bad_n=0 f dir lf hdr target lt
    while IFS= read -r f; do
        dir=${f%%/*}
        lf=$(layer_of "$dir")
        [ -n "$lf" ] || continue
        case $f in *_main.c) lf=3 ;; esac  # a tool's main: the top layer
        while IFS= read -r hdr; do
            case $hdr in
            ../*) echo "$f: includes \"$hdr\" (relative path out of its folder)"; bad_n=$((bad_n + 1)); continue ;;
            esac
            target=${hdr%%/*}
            [ "$target" = "$hdr" ] && continue  # same folder
            lt=$(layer_of "$target")
            [ -n "$lt" ] || continue
            if [ "$lt" -gt "$lf" ] && ! allowed "$f:$hdr"; then
                echo "$f: includes \"$hdr\" ($dir is below $target)"; bad_n=$((bad_n + 1))
            fi
        done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/p' "$root/$f")
        if [ "$dir" = kernels ] &&
            grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]+<(hdf5|H5|gsl/)' "$root/$f"; then
            echo "$f: kernels/ includes an HDF5 or GSL header"; bad_n=$((bad_n + 1))
        fi
    done < <(cd "$root" && find kernels runtime datasets train prune quantize export \
        -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) 2>/dev/null | sort)
    [ "$bad_n" -eq 0 ]
}

# --- the tree -------------------------------------------------------------------
if out=$(deps_check .); then
    ok "deps: no upward include (allow-list: ${#ALLOW_UPWARD[@]})"
else
    bad "deps" "upward includes:
$out"
fi

# --- the checker catches a planted violation -------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kernels" "$tmp/runtime" "$tmp/prune"
printf '#include "kernels/a.h"\n' >"$tmp/runtime/ok.c"
printf '#include "datasets/cifar.h"\n' >"$tmp/runtime/tool_main.c"  # a tool's main may
printf '#include "runtime/error.h"\n' >"$tmp/kernels/up.c"
printf '#include "prune/mask.h"\n#include "../x.h"\n' >"$tmp/runtime/up2.c"
printf '#include <gsl/gsl_rng.h>\n' >"$tmp/kernels/gsl.c"
if out=$(deps_check "$tmp"); then
    bad "deps: planted" "the checker missed upward includes"
elif [ "$(grep -c . <<<"$out")" -eq 4 ] && ! grep -qE 'ok.c|tool_main.c' <<<"$out"; then
    ok "deps: planted upward includes are caught"
else
    bad "deps: planted" "want 4 findings, got: $out"
fi
summary
