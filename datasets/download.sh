#!/usr/bin/env bash
# Downloads the official CIFAR-10 and/or CIFAR-100 binary tarballs from the
# University of Toronto, verifies the MD5 sums published on
# https://www.cs.toronto.edu/~kriz/cifar.html, and unpacks them into the data
# folder (default data/), giving the layouts the toolkit reads:
#   data/cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin
#   data/cifar-100-binary/{train,test}.bin
set -euo pipefail

prog=download.sh
base_url=https://www.cs.toronto.edu/~kriz
md5_cifar10=c32a1d4ab5d03f1284b67883e8d87530
md5_cifar100=03b5dce01913d631647c71ecec9e9cb8

# --- messages -----------------------------------------------------------------

# Prints the usage text.
usage() {
    cat <<EOF
usage: $prog [options] [cifar10|cifar100|all ...]

Downloads the official CIFAR binary tarballs, checks their MD5 sums and
unpacks them so that 'train cifar10' / 'train cifar100' find them.

datasets (default: cifar100):
  cifar10        cifar-10-binary.tar.gz  (162 MB) -> DIR/cifar-10-batches-bin/
  cifar100       cifar-100-binary.tar.gz (161 MB) -> DIR/cifar-100-binary/
  all            both

options:
  -d, --dir DIR  data folder to fill (default: data)
  --url URL      where the tarballs are (default: $base_url;
                 a mirror or file:// folder holding the same files)
  -f, --force    download and unpack again even when the files are present
  -k, --keep     keep the downloaded tarball after unpacking (default: delete)
  -q, --quiet    no progress output
  -h, --help     this text

Needs curl or wget, md5sum (or md5) and tar. Exit status: 0 done, 1 failed,
2 bad usage.
EOF
}

# Prints a one-line error and exits with status 1.
die() {
    echo "$prog: $*" >&2
    exit 1
}

# Prints a one-line usage error and exits with status 2.
usage_error() {
    echo "$prog: $* (try --help)" >&2
    exit 2
}

# Prints a progress line unless --quiet.
say() {
    [ "$quiet" = 1 ] || echo "$prog: $*"
}

# --- steps --------------------------------------------------------------------

# Prints the MD5 sum of a file.
md5_of() {
    if command -v md5sum >/dev/null 2>&1; then
        md5sum "$1" | cut -d' ' -f1
    elif command -v md5 >/dev/null 2>&1; then
        md5 -q "$1"
    else
        die "neither md5sum nor md5 found"
    fi
}

# Downloads URL to FILE (through FILE.part, so an interrupted run leaves no
# file that looks complete).
fetch() {
    local url=$1 out=$2
    rm -f "$out.part"
    if command -v curl >/dev/null 2>&1; then
        local flags=(-fL --retry 3 -o "$out.part")
        [ "$quiet" = 1 ] && flags+=(-sS)
        curl "${flags[@]}" "$url" || { rm -f "$out.part"; die "download failed ($url)"; }
    elif command -v wget >/dev/null 2>&1; then
        local flags=(-O "$out.part")
        [ "$quiet" = 1 ] && flags+=(-q)
        wget "${flags[@]}" "$url" || { rm -f "$out.part"; die "download failed ($url)"; }
    else
        die "neither curl nor wget found"
    fi
    mv "$out.part" "$out"
}

# True when every file of the unpacked layout is present.
complete() {
    local dir=$1; shift
    local f
    for f in "$@"; do
        [ -s "$dir/$f" ] || return 1
    done
}

# Fetches, verifies and unpacks one dataset: get NAME TARBALL MD5 FOLDER FILES...
get() {
    local name=$1 tarball=$2 sum=$3 folder=$4; shift 4
    if [ "$force" = 0 ] && complete "$dir/$folder" "$@"; then
        say "$name already present ($dir/$folder)"
        return
    fi
    local file=$dir/$tarball
    if [ "$force" = 1 ] || [ ! -f "$file" ] || [ "$(md5_of "$file")" != "$sum" ]; then
        say "downloading $base_url/$tarball"
        fetch "$base_url/$tarball" "$file"
    fi
    local got
    got=$(md5_of "$file")
    if [ "$got" != "$sum" ]; then
        rm -f "$file"
        die "checksum mismatch ($file, md5 $got, expected $sum): corrupt or not the official file; removed it"
    fi
    say "checksum ok ($tarball)"
    tar -xzf "$file" -C "$dir" || die "cannot unpack ($file)"
    complete "$dir/$folder" "$@" || die "unpacked files missing ($dir/$folder)"
    [ "$keep" = 1 ] || rm -f "$file"
    say "$name ready ($dir/$folder)"
}

# --- main ---------------------------------------------------------------------

dir=data
force=0
keep=0
quiet=0
want=()
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        -d|--dir) [ $# -ge 2 ] || usage_error "$1 needs a folder"; dir=$2; shift ;;
        --dir=*) dir=${1#--dir=} ;;
        --url) [ $# -ge 2 ] || usage_error "$1 needs a URL"; base_url=${2%/}; shift ;;
        --url=*) base_url=${1#--url=}; base_url=${base_url%/} ;;
        -f|--force) force=1 ;;
        -k|--keep) keep=1 ;;
        -q|--quiet) quiet=1 ;;
        cifar10|cifar100) want+=("$1") ;;
        all) want+=(cifar10 cifar100) ;;
        -*) usage_error "unknown option ($1)" ;;
        *) usage_error "unknown dataset ($1): expected cifar10, cifar100 or all" ;;
    esac
    shift
done
[ -n "$dir" ] || usage_error "empty --dir"
[ ${#want[@]} -gt 0 ] || want=(cifar100)
command -v tar >/dev/null 2>&1 || die "tar not found"
mkdir -p "$dir" || die "cannot create folder ($dir)"

done_10=0
done_100=0
for w in "${want[@]}"; do
    case $w in
        cifar10)
            [ "$done_10" = 1 ] && continue
            get cifar10 cifar-10-binary.tar.gz "$md5_cifar10" cifar-10-batches-bin \
                data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin \
                data_batch_5.bin test_batch.bin
            done_10=1 ;;
        cifar100)
            [ "$done_100" = 1 ] && continue
            get cifar100 cifar-100-binary.tar.gz "$md5_cifar100" cifar-100-binary \
                train.bin test.bin
            done_100=1 ;;
    esac
done
