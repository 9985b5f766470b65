#!/usr/bin/env bash
# Installs what the build needs (Debian/Ubuntu packages, when run as root),
# then builds everything. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
pkgs=(build-essential libhdf5-dev hdf5-tools libopenblas-dev libgsl-dev gnuplot-nox
      python3-h5py python3-scipy python3-numpy)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "setup: installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "setup: missing packages: ${missing[*]}" >&2
        echo "setup: run 'sudo apt-get install ${missing[*]}' or run this script as root" >&2
        exit 1
    fi
fi
make -j"$(nproc)" all
