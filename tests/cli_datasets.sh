#!/usr/bin/env bash
# CLI tests of datasets/download.sh without internet: usage, bad usage, a
# file:// mirror holding a wrong tarball (checksum refused, nothing left), a
# missing mirror, and folders already in place (no download at all).
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0; skip=0
tmp=$(mktemp -d /tmp/sc_cli_datasets_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
dl=datasets/download.sh

# check NAME CONDITION...: counts a passed or failed check.
check() {
    local name=$1; shift
    if "$@"; then pass=$((pass + 1)); echo "ok   $name"
    else fail=$((fail + 1)); echo "FAIL $name"; fi
}

# run_dl ARGS...: runs the script, keeping status, stdout and stderr.
run_dl() {
    bash "$dl" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
}

run_dl --help
check help_exit_0 test "$rc" -eq 0
check help_lists_options grep -q -- '--dir DIR' "$tmp/out"
run_dl --bogus
check bad_option_exit_2 test "$rc" -eq 2
check bad_option_one_line test "$(wc -l <"$tmp/err")" -eq 1
run_dl cifar1000
check bad_dataset_exit_2 test "$rc" -eq 2
check bad_dataset_named grep -q 'unknown dataset (cifar1000)' "$tmp/err"

if command -v curl >/dev/null 2>&1 || command -v wget >/dev/null 2>&1; then
    mkdir -p "$tmp/mirror/cifar-100-binary"
    echo fake >"$tmp/mirror/cifar-100-binary/train.bin"
    echo fake >"$tmp/mirror/cifar-100-binary/test.bin"
    tar -czf "$tmp/mirror/cifar-100-binary.tar.gz" -C "$tmp/mirror" cifar-100-binary
    run_dl --url "file://$tmp/mirror" --dir "$tmp/d1" -q cifar100
    check bad_checksum_exit_1 test "$rc" -eq 1
    check bad_checksum_message grep -q 'checksum mismatch (.*cifar-100-binary.tar.gz' "$tmp/err"
    check bad_checksum_cleaned test ! -e "$tmp/d1/cifar-100-binary.tar.gz" -a ! -e "$tmp/d1/cifar-100-binary"
    run_dl --url "file://$tmp/nowhere" --dir "$tmp/d2" -q cifar10
    check no_mirror_exit_1 test "$rc" -eq 1
    check no_mirror_message grep -q 'download failed (file://.*cifar-10-binary.tar.gz)' "$tmp/err"
    check no_mirror_no_part test -z "$(ls "$tmp/d2")"
else
    echo "  skip mirror tests: neither curl nor wget"; skip=$((skip + 6))
fi

mkdir -p "$tmp/d3/cifar-100-binary" "$tmp/d3/cifar-10-batches-bin"
echo x >"$tmp/d3/cifar-100-binary/train.bin"; echo x >"$tmp/d3/cifar-100-binary/test.bin"
for f in data_batch_1 data_batch_2 data_batch_3 data_batch_4 data_batch_5 test_batch; do
    echo x >"$tmp/d3/cifar-10-batches-bin/$f.bin"
done
run_dl --url "file://$tmp/nowhere" --dir "$tmp/d3" all
check present_exit_0 test "$rc" -eq 0
check present_says_so test "$(grep -c 'already present' "$tmp/out")" -eq 2

echo "cli_datasets: ${pass} passed, ${fail} failed, ${skip} skipped"
[ "$fail" -eq 0 ]
