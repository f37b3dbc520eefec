#!/usr/bin/env bash
# shellcheck disable=SC2317  # the functions run through part() (bash -c), which shellcheck cannot see
# The GPU path in one command (docs/gpu.md): on a machine with a CUDA GPU, Python 3.12 and
# torch (2.11 or later), no network, this repository and gpu_carry/ (scripts/prepare_gpu_carry.sh):
#
#   scripts/gpu_check.sh OUTDIR                      # on the GPU, within 9 minutes
#   scripts/gpu_check.sh OUTDIR --device cpu --tiny  # every part at toy size on the CPU
#
# Parts, in order, each under its own time cap (a hang costs that part only) and each appending
# to OUTDIR as it goes (a run cut short still leaves its evidence):
#   setup  wheels from gpu_carry/wheels for the modules the Python lacks (pip, offline, into a
#          folder on PYTHONPATH); FashionMNIST from gpu_carry/data unpacked as the data root
#   env    GPU, driver, CUDA, cuDNN and torch versions, TF32 settings
#   tests  pytest -m cuda tests/test_cuda.py (measured differences in OUTDIR/cuda_report.jsonl),
#          then the CPU-side host-sync count tests/test_host_sync.py
#   bench  benchmarks/bench_stages.py: local (fp32/bf16 × grouped/one at a time), dense and
#          fedcvae (fp32, bf16) on the device
#   cell   scripts/gpu_paper_cell.py: DENSE Table 1, FMNIST, α = 0.1, seed 1, end to end at the
#          paper's scale, with each stage's time and peak GPU memory (OUTDIR/paper_cell*.json*)
#   grid   (only when named) run_all.py on a grid of paper-scale tasks on the device (--grid FILE,
#          default results/grids/gpu_fmnist.yaml; the notebook stack from gpu_carry's
#          wheels/notebook.tar.xz where the image lacks it), --jobs tasks at once, for the rest of the budget; each finished
#          task's sidecar is copied to OUTDIR/grid/ as it lands (ship them like the CPU's)
# Options: --device cuda|cpu (default cuda), --tiny (toy sizes), --parts setup,env,tests,bench,cell
# (or grid), --budget SECONDS (all parts; default 540 on CUDA, 2400 on the CPU), --python PY
# (default python3), --grid FILE, --jobs N (grid tasks at once, default 2).
# OUTDIR gets at most 7 files: gpu_check.log (every part's output), summary.txt (one line a part),
# cuda_report.jsonl, paper_cell.json, paper_cell_epochs.jsonl, paper_cell_records.json; and the
# folder grid/ (sidecars) with the grid part. The exit status is 0 when every part that ran
# succeeded.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2

if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then sed -n '3,30p' "$0"; exit 2; fi
OUT=$1; shift
DEVICE=cuda
TINY=0
PARTS=setup,env,tests,bench,cell
BUDGET=
PY=${PYTHON:-python3}
GRID=results/grids/gpu_fmnist.yaml
JOBS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --tiny) TINY=1; shift ;;
    --parts) PARTS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --grid) GRID=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BUDGET" ]; then
  if [ "$DEVICE" = cpu ]; then BUDGET=2400; else BUDGET=540; fi
fi
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
LOG=$OUT/gpu_check.log
SUMMARY=$OUT/summary.txt
WORK=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/ofl-gpu-check}  # wheels, data, caches: not in OUTDIR
SITE=$WORK/site
mkdir -p "$WORK" "$SITE"
START=$(date +%s)
FAILED=0

export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 MPLBACKEND=Agg
export OFL_CACHE_DIR=$WORK/cache OFL_CUDA_REPORT=$OUT/cuda_report.jsonl PY SITE WORK

log() { echo "[$(date -u +%T) +$(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
want() { case ",$PARTS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# part NAME CAP CMD...: run CMD (a command or an exported function) under min(CAP, time left),
# its output appended to the log
part() {
  local name=$1 cap=$2; shift 2
  local rest; rest=$(left)
  [ "$cap" -gt "$rest" ] && cap=$rest
  if [ "$cap" -lt 10 ]; then
    log "== $name: skipped, no time left (budget ${BUDGET}s)"
    printf '%s\tskipped\t0\tno time left\n' "$name" >> "$SUMMARY"
    FAILED=1
    return 1
  fi
  log "== $name (cap ${cap}s): $*"
  local t0 rc; t0=$(date +%s)
  timeout --kill-after=15 "$cap" bash -c '"$@"' "$name" "$@" >> "$LOG" 2>&1
  rc=$?
  local secs=$(( $(date +%s) - t0 ))
  local note=ok
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && note="timed out after ${cap}s"
  [ "$rc" -ne 0 ] && [ "$note" = ok ] && note=failed
  [ "$rc" -ne 0 ] && FAILED=1
  log "== $name: rc=$rc in ${secs}s ($note)"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$secs" "$note" >> "$SUMMARY"
  return "$rc"
}

printf '# run %s device=%s tiny=%s\n' "$(date -u +%FT%TZ)" "$DEVICE" "$TINY" >> "$SUMMARY"
log "gpu_check: device=$DEVICE tiny=$TINY parts=$PARTS budget=${BUDGET}s out=$OUT work=$WORK" \
    "commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# --- setup: wheels for what is missing, the data -----------------------------------------------
# install_missing DIR PAIRS: for each module:dist pair whose module does not import, the dist's
# wheel from DIR into $SITE (pip, offline, no dependencies: every one is named)
install_missing() {
  local dir=$1 pairs=$2 missing=() p mod dist whl
  for p in $pairs; do
    mod=${p%%:*}; dist=${p#*:}
    "$PY" -c "import $mod" 2>/dev/null && continue
    whl=$(find "$dir" -maxdepth 1 -iname "${dist//-/_}-*.whl" 2>/dev/null | head -1)
    if [ -z "$whl" ]; then
      echo "missing module $mod and no wheel for $dist in $dir"
      return 1
    fi
    missing+=("$whl")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing into $SITE: ${missing[*]##*/}"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "${missing[@]}" || return 1
  fi
}
export -f install_missing

# copy_missing ROOT PAIRS: as install_missing, from ROOT/<dist>/ (a distribution unpacked)
copy_missing() {
  local root=$1 pairs=$2 copied=() p mod dist
  for p in $pairs; do
    mod=${p%%:*}; dist=${p#*:}
    "$PY" -c "import $mod" 2>/dev/null && continue
    if [ ! -d "$root/$dist" ]; then
      echo "missing module $mod and no $dist in $root (scripts/prepare_gpu_carry.sh)"
      return 1
    fi
    cp -r "$root/$dist/." "$SITE/"
    copied+=("$dist")
  done
  [ ${#copied[@]} -gt 0 ] && echo "copied into $SITE: ${copied[*]}"
  return 0
}
export -f copy_missing

setup() {
  "$PY" -c 'import torch' || { echo "no torch in $PY"; return 1; }
  # module:dist pairs that ofl_core and the check import beyond torch
  install_missing gpu_carry/wheels "numpy:numpy pandas:pandas dateutil:python-dateutil
    tzdata:tzdata yaml:pyyaml tqdm:tqdm filelock:filelock platformdirs:platformdirs pytest:pytest
    pluggy:pluggy iniconfig:iniconfig packaging:packaging pygments:pygments" || return 1
  "$PY" -c 'import numpy, pandas, yaml, tqdm, filelock, platformdirs, pytest, ofl_core.experiment' \
    || return 1
  # FashionMNIST: gpu_carry's xz files unpacked as the data root (else the loader's own search)
  if ls gpu_carry/data/FashionMNIST/raw/*.xz >/dev/null 2>&1; then
    mkdir -p "$WORK/data/FashionMNIST/raw"
    "$PY" - gpu_carry/data/FashionMNIST/raw "$WORK/data/FashionMNIST/raw" <<'EOF' || return 1
import lzma, os, shutil, sys
from pathlib import Path
src, dst = map(Path, sys.argv[1:])
for f in sorted(src.glob("*.xz")):
    out = dst / f.stem
    if not out.exists():
        with lzma.open(f) as fin, open(f"{out}.tmp", "wb") as fout:
            shutil.copyfileobj(fin, fout)
        os.replace(f"{out}.tmp", out)
    print(out, out.stat().st_size)
EOF
  fi
}
export -f setup
if want setup; then
  part setup 180 setup
  [ -d "$WORK/data/FashionMNIST/raw" ] && export OFL_DATA_ROOT=$WORK/data
fi

# --- env ---------------------------------------------------------------------------------------
env_info() {
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader
  "$PY" - <<'EOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version(), "cuda available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.1f} GiB", "capability", p.major, p.minor,
          "bf16 native", torch.cuda.is_bf16_supported(including_emulation=False))
    print("fp32 precision: cudnn conv", torch.backends.cudnn.conv.fp32_precision,
          "matmul", torch.backends.cuda.matmul.fp32_precision,
          "| cudnn.benchmark", torch.backends.cudnn.benchmark,
          "cudnn.deterministic", torch.backends.cudnn.deterministic)
import importlib.metadata as md
have = []
for dist in ("numpy", "pandas", "papermill", "ipykernel", "ipython", "nbclient", "matplotlib",
             "seaborn", "pillow", "scipy", "torchvision", "jupytext"):
    try:
        have.append(f"{dist} {md.version(dist)}")
    except md.PackageNotFoundError:
        have.append(f"{dist} -")
print("image has:", ", ".join(have))
EOF
}
export -f env_info
want env && part env 60 env_info

# --- tests -------------------------------------------------------------------------------------
if want tests; then
  SYNC_CAP=60; [ "$DEVICE" = cpu ] && SYNC_CAP=300
  # -o addopts="": pyproject's addopts name pytest-xdist and nbval, which the image may lack
  part tests-cuda 180 "$PY" -m pytest -o addopts="" -p no:cacheprovider -q -rs -m cuda \
    tests/test_cuda.py
  part tests-host-sync "$SYNC_CAP" "$PY" -m pytest -o addopts="" -p no:cacheprovider -q -rs \
    tests/test_host_sync.py
fi

# --- bench: the three standard stages on the device --------------------------------------------
if want bench; then
  tiny=(); [ "$TINY" = 1 ] && tiny=(--tiny)
  # GPU_CHECK_BENCH_CAP=SECONDS: each bench run's cap (default 60 on a GPU, 400 on the CPU)
  cap=60; [ "$DEVICE" = cpu ] && cap=400; cap=${GPU_CHECK_BENCH_CAP:-$cap}
  THREADS=$(nproc 2>/dev/null || echo 1); [ "$THREADS" -gt 4 ] && THREADS=4
  reserve=0; want cell && reserve=$(( BUDGET / 2 ))  # the cell keeps half of the budget
  runs=("local bf16 grouped" "local fp32 grouped" "local bf16 sequential" "dense bf16 auto"
        "dense fp32 auto" "fedcvae fp32 auto" "local fp32 sequential" "fedcvae bf16 auto")
  [ "$TINY" = 1 ] && runs=("local bf16 grouped" "local fp32 sequential" "dense fp32 auto"
                           "fedcvae bf16 auto")
  # GPU_CHECK_BENCH="dense bf16 auto;fedcvae fp32 auto": only these runs (stage precision trainer)
  [ -n "${GPU_CHECK_BENCH:-}" ] && IFS=';' read -r -a runs <<< "$GPU_CHECK_BENCH"
  for r in "${runs[@]}"; do
    read -r stage prec trainer <<< "$r"
    if [ $(( $(left) - reserve )) -lt 20 ]; then
      log "== bench $stage $prec $trainer: skipped (the rest of the budget is the cell's)"
      printf 'bench-%s-%s-%s\tskipped\t0\tbudget\n' "$stage" "$prec" "$trainer" >> "$SUMMARY"
      continue
    fi
    c=$(( $(left) - reserve )); [ "$c" -gt "$cap" ] && c=$cap
    part "bench-$stage-$prec-$trainer" "$c" "$PY" benchmarks/bench_stages.py --stage "$stage" \
      --precision "$prec" --trainer "$trainer" --device "$DEVICE" --threads "$THREADS" \
      --cache-dir "$WORK/bench-cache" "${tiny[@]}"
    grep -E "^$stage( \(tiny\))?: " "$LOG" | tail -1 | sed "s/^/  /" >> "$SUMMARY"
  done
fi

# --- cell: one paper-scale cell end to end -----------------------------------------------------
if want cell; then
  tiny=(); [ "$TINY" = 1 ] && tiny=(--tiny)
  part cell "$(left)" "$PY" scripts/gpu_paper_cell.py --out "$OUT" --device "$DEVICE" \
    --cache-dir "$WORK/cell-cache" "${tiny[@]}"
fi

# --- grid: paper-scale tasks through run_all.py on the device ----------------------------------
grid_run() {
  # the notebook stack (papermill and its kernel, the notebooks' figures) where the image lacks it:
  # gpu_carry's archive holds each distribution unpacked in a folder of its own
  if [ -s gpu_carry/wheels/notebook.tar.xz ] && [ ! -d "$WORK/notebook" ]; then
    tar -C "$WORK" -xJf gpu_carry/wheels/notebook.tar.xz || return 1
  fi
  copy_missing "$WORK/notebook" "papermill:papermill nbformat:nbformat
    nbclient:nbclient jupyter_client:jupyter_client jupyter_core:jupyter_core ipykernel:ipykernel
    IPython:ipython traitlets:traitlets zmq:pyzmq tornado:tornado tenacity:tenacity click:click
    requests:requests urllib3:urllib3 certifi:certifi charset_normalizer:charset_normalizer
    idna:idna fastjsonschema:fastjsonschema jsonschema:jsonschema
    jsonschema_specifications:jsonschema_specifications referencing:referencing rpds:rpds_py
    attr:attrs comm:comm entrypoints:entrypoints matplotlib_inline:matplotlib_inline
    nest_asyncio2:nest_asyncio2 psutil:psutil pexpect:pexpect ptyprocess:ptyprocess
    prompt_toolkit:prompt_toolkit wcwidth:wcwidth stack_data:stack_data executing:executing
    asttokens:asttokens pure_eval:pure_eval typing_extensions:typing_extensions
    ipython_pygments_lexers:ipython_pygments_lexers matplotlib:matplotlib seaborn:seaborn
    PIL:pillow kiwisolver:kiwisolver contourpy:contourpy cycler:cycler pyparsing:pyparsing
    fontTools:fonttools jinja2:jinja2 markupsafe:markupsafe" \
    || return 1
  "$PY" -c 'import papermill, ipykernel, matplotlib, seaborn' || return 1
  # the grid's tasks on this check's device (the shipped GPU grid names cuda already)
  "$PY" - "$GRID" "$WORK/grid.yaml" "$DEVICE" <<'EOF' || return 1
import sys, yaml
src, dst, device = sys.argv[1:]
grid = yaml.safe_load(open(src))
for entries in grid.values():
    for e in entries:
        e["device"] = device
yaml.safe_dump(grid, open(dst, "w"), sort_keys=False)
EOF
  # clients a previous check trained (its OUTDIR/grid/cache, moved to gpu_carry/cache): a column
  # cut by the budget goes on with the same clients
  if [ -d gpu_carry/cache ]; then
    mkdir -p "$OFL_CACHE_DIR" && cp -r gpu_carry/cache/. "$OFL_CACHE_DIR/" || return 1
  fi
  "$PY" run_all.py --grid "$WORK/grid.yaml" --out "$WORK/grid-out" --jobs "$JOBS" \
    --threads-per-task 4
}
export -f grid_run
export GRID JOBS DEVICE
if want grid; then
  part grid "$(left)" grid_run
  # every finished task's sidecar (a run cut by the budget keeps the tasks that finished)
  mkdir -p "$OUT/grid/cache"
  find "$WORK/grid-out/runs" -name '*.json' ! -name '*.failed.json' -exec cp {} "$OUT/grid/" \; \
    2>/dev/null
  # the trained clients (not the server checkpoints), for the next check's gpu_carry/cache
  (cd "$OFL_CACHE_DIR" 2>/dev/null && find . -name '*.pt' ! -path '*/servers/*' \
     ! -path '*/evidence/*' -exec cp --parents {} "$OUT/grid/cache/" \;)
  log "grid: $(find "$OUT/grid" -maxdepth 1 -name '*.json' | wc -l) finished task(s) in" \
      "$OUT/grid, $(find "$OUT/grid/cache" -name '*.pt' | wc -l) client(s) in $OUT/grid/cache"
fi

log "gpu_check done in $(( $(date +%s) - START ))s; summary:"
tee -a "$LOG" < "$SUMMARY"
exit "$FAILED"
