#!/usr/bin/env bash
# Prepare gpu_carry/ (git-ignored): what scripts/gpu_check.sh needs on a GPU machine that has
# only Python 3.12 and torch, and no network:
#   gpu_carry/data/FashionMNIST/raw/*.xz  the four FashionMNIST idx files, xz-compressed (the
#                                         Debian package dataset-fashion-mnist's, or --fmnist DIR)
#   gpu_carry/wheels/*.whl                Python 3.12 manylinux x86-64 wheels of what ofl_core and
#                                         the check import beyond torch (numpy, pandas, pyyaml,
#                                         tqdm, filelock, platformdirs, pytest and their needs)
#   gpu_carry/wheels/notebook.tar.xz      the notebook stack for the check's grid part (papermill,
#                                         ipykernel, matplotlib, seaborn and what they import),
#                                         unpacked, one folder per distribution
#   gpu_carry/MANIFEST.txt                what is there, and its size
# The check installs a wheel only where its module is missing (pip --no-index, offline).
# What travels to the GPU machine (the working tree + gpu_carry) must stay under 64 MiB: the
# script adds the working tree's size and, over --budget-mib, leaves out numpy, then pandas,
# then the notebook stack (then the GPU image must have them) and says so.
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

# 2. wheels, in the order they are kept when the budget is short (numpy, then pandas, then the
#    notebook stack go first)
SMALL=(pyyaml tqdm filelock platformdirs pytest pluggy iniconfig packaging pygments python-dateutil tzdata)
LARGE=(pandas numpy)
# the notebook stack, for gpu_check.sh's grid part (run_all.py through papermill, the notebooks'
# figures): papermill, ipykernel and matplotlib/seaborn with what they import, less debugpy and
# jedi (ipykernel and IPython run without them)
NOTEBOOK=(papermill nbformat nbclient jupyter_client jupyter_core ipykernel ipython traitlets pyzmq
  tornado tenacity click requests urllib3 certifi charset_normalizer idna fastjsonschema jsonschema
  jsonschema_specifications referencing rpds_py attrs comm entrypoints matplotlib_inline
  nest_asyncio2 psutil pexpect ptyprocess prompt_toolkit wcwidth stack_data executing asttokens
  pure_eval typing_extensions ipython_pygments_lexers
  jinja2 markupsafe matplotlib seaborn pillow fonttools kiwisolver contourpy cycler pyparsing)
download() {  # download DIR DIST...: Python 3.12 x86-64 wheels, no dependencies (all are named)
  local dir=$1; shift
  mkdir -p "$dir"
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any \
    -d "$dir" "$@" 2>&1 | grep -v "^WARNING: Location" || true
}
download "$CARRY/wheels" "${SMALL[@]}" "${LARGE[@]}"
# the notebook stack travels unpacked, one folder per distribution (what pip --target would
# write), in one xz archive: 19 MiB against 29 MiB of wheels
if [ ! -s "$CARRY/wheels/notebook.tar.xz" ]; then
  tmp=$(mktemp -d)
  download "$tmp/whl" "${NOTEBOOK[@]}"
  for w in "$tmp"/whl/*.whl; do
    d=$(basename "$w"); d=${d%%-*}
    "$PY" -m zipfile -e "$w" "$tmp/notebook/${d,,}"
  done
  tar -C "$tmp" -cf - notebook | xz -9e -T2 > "$CARRY/wheels/notebook.tar.xz.tmp"
  mv "$CARRY/wheels/notebook.tar.xz.tmp" "$CARRY/wheels/notebook.tar.xz"
  rm -rf "$tmp"
fi

# 3. the budget: the working tree that travels + gpu_carry
tree_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null \
             | awk '{s+=$1} END {print s+0}')
carry_bytes() { du -sb "$CARRY" | cut -f1; }
budget=$(( BUDGET_MIB * 1024 * 1024 ))
dropped=()
for big in numpy pandas notebook; do
  [ $(( tree_bytes + $(carry_bytes) )) -le "$budget" ] && break
  if [ "$big" = notebook ]; then rm -f "$CARRY/wheels/notebook.tar.xz"; else rm -f "$CARRY"/wheels/"$big"-*.whl; fi
  dropped+=("$big")
done

{
  echo "gpu_carry for scripts/gpu_check.sh, made $(date -u +%FT%TZ) by scripts/prepare_gpu_carry.sh"
  echo "working tree: $(( tree_bytes / 1024 )) KiB; gpu_carry: $(( $(carry_bytes) / 1024 )) KiB;" \
       "together $(( (tree_bytes + $(carry_bytes)) / 1024 )) KiB of $(( budget / 1024 )) KiB"
  [ ${#dropped[@]} -gt 0 ] && echo "left out for the budget (the GPU image must have them): ${dropped[*]}"
  [ -s "$CARRY/wheels/notebook.tar.xz" ] || echo "no notebook stack: gpu_check.sh's grid part needs papermill, ipykernel, matplotlib and seaborn in the GPU image"
  (cd "$CARRY" && find . -type f ! -name MANIFEST.txt -printf '%s\t%p\n' | sort -k2)
} > "$CARRY/MANIFEST.txt"
cat "$CARRY/MANIFEST.txt"
total=$(( tree_bytes + $(carry_bytes) ))
if [ "$total" -gt "$budget" ]; then
  echo "over the budget even without numpy, pandas and the notebook stack: $(( total / 1024 )) KiB" >&2
  exit 1
fi
