#!/usr/bin/env bash
# Prepare gpu_carry/ (git-ignored): what scripts/gpu_check.sh needs on a GPU machine that has
# only Python 3.12 and torch, and no network:
#   gpu_carry/data/FashionMNIST/raw/*.xz  the four FashionMNIST idx files, xz-compressed (the
#                                         Debian package dataset-fashion-mnist's, or --fmnist DIR)
#   gpu_carry/wheels/*.whl                Python 3.12 manylinux x86-64 wheels of what ofl_core and
#                                         the check import beyond torch (numpy, pandas, pyyaml,
#                                         tqdm, filelock, platformdirs, pytest and their needs)
#   gpu_carry/MANIFEST.txt                what is there, and its size
# The check installs a wheel only where its module is missing (pip --no-index, offline).
# What travels to the GPU machine (the working tree + gpu_carry) must stay under 64 MiB: the
# script adds the working tree's size and, over --budget-mib, leaves out numpy, then pandas
# (then the GPU image must have them) and says so.
#
#   scripts/prepare_gpu_carry.sh [--fmnist DIR] [--budget-mib 64] [--python PY]
set -euo pipefail
cd "$(dirname "$0")/.."

FMNIST=/usr/share/datasets/fashion-mnist
BUDGET_MIB=64
PY=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --fmnist) FMNIST=$2; shift 2 ;;
    --budget-mib) BUDGET_MIB=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done

CARRY=gpu_carry
git check-ignore -q "$CARRY/x" || { echo "$CARRY/ must be git-ignored (.gitignore)" >&2; exit 1; }
mkdir -p "$CARRY/data/FashionMNIST/raw" "$CARRY/wheels"

# 1. FashionMNIST, xz-compressed (26 MiB as gzip, about 23 MiB as xz)
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  dst="$CARRY/data/FashionMNIST/raw/$f.xz"
  [ -s "$dst" ] && continue
  src="$FMNIST/$f.gz"; [ -f "$src" ] || src="$FMNIST/$f"
  [ -f "$src" ] || { echo "missing $FMNIST/$f(.gz): sudo apt-get install dataset-fashion-mnist, or --fmnist DIR" >&2; exit 1; }
  echo "compressing $src"
  "$PY" - "$src" "$dst" <<'EOF'
import gzip, lzma, os, shutil, sys
src, dst = sys.argv[1:]
opener = gzip.open if src.endswith(".gz") else open
with opener(src, "rb") as fin, lzma.open(dst + ".tmp", "wb", preset=9) as fout:
    shutil.copyfileobj(fin, fout)
os.replace(dst + ".tmp", dst)
EOF
done

# 2. wheels, in the order they are kept when the budget is short (numpy, then pandas, go first)
SMALL=(pyyaml tqdm filelock platformdirs pytest pluggy iniconfig packaging pygments python-dateutil tzdata)
LARGE=(pandas numpy)
download() {  # download DIST...: Python 3.12 x86-64 wheels, no dependencies (all are named)
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any \
    -d "$CARRY/wheels" "$@" 2>&1 | grep -v "^WARNING: Location" || true
}
download "${SMALL[@]}" "${LARGE[@]}"

# 3. the budget: the working tree that travels + gpu_carry
tree_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null \
             | awk '{s+=$1} END {print s+0}')
carry_bytes() { du -sb "$CARRY" | cut -f1; }
budget=$(( BUDGET_MIB * 1024 * 1024 ))
dropped=()
for big in numpy pandas; do
  [ $(( tree_bytes + $(carry_bytes) )) -le "$budget" ] && break
  rm -f "$CARRY"/wheels/"$big"-*.whl
  dropped+=("$big")
done

{
  echo "gpu_carry for scripts/gpu_check.sh, made $(date -u +%FT%TZ) by scripts/prepare_gpu_carry.sh"
  echo "working tree: $(( tree_bytes / 1024 )) KiB; gpu_carry: $(( $(carry_bytes) / 1024 )) KiB;" \
       "together $(( (tree_bytes + $(carry_bytes)) / 1024 )) KiB of $(( budget / 1024 )) KiB"
  [ ${#dropped[@]} -gt 0 ] && echo "left out for the budget (the GPU image must have them): ${dropped[*]}"
  (cd "$CARRY" && find . -type f ! -name MANIFEST.txt -printf '%s\t%p\n' | sort -k2)
} > "$CARRY/MANIFEST.txt"
cat "$CARRY/MANIFEST.txt"
total=$(( tree_bytes + $(carry_bytes) ))
if [ "$total" -gt "$budget" ]; then
  echo "over the budget even without numpy and pandas: $(( total / 1024 )) KiB" >&2
  exit 1
fi
