#!/usr/bin/env bash
# A single-node SLURM on this machine, to try and test the cluster executors against a real
# scheduler (tests/test_batch_slurm.py; README "Testing against a local SLURM").
#
#   scripts/slurm_localhost.sh          # up: install (Debian slurm-wlm, munge), configure, start
#   scripts/slurm_localhost.sh status   # exit 0 when this script's SLURM answers
#   scripts/slurm_localhost.sh down     # cancel its jobs, stop slurmd, slurmctld, munged
#
# One node (this host, CPUs = nproc), one partition "debug" (the default), no accounting, no
# cgroups. Idempotent: "up" when it is already up does nothing. Needs root or passwordless sudo,
# and apt-get unless slurmctld, slurmd and munged are installed (OFL_SLURM_NO_INSTALL=1: never
# install, exit 3 instead; the test fixture sets it). Exit status: 0 up / stopped,
# 3 cannot here (not root, no apt, someone else's slurm.conf), 1 it tried and failed (see
# /var/log/slurm/*.log).
set -euo pipefail

action=${1:-up}
CONF=/etc/slurm/slurm.conf
MARK="# written by ofl scripts/slurm_localhost.sh"
CLUSTER=ofl-localhost
LOGS=/var/log/slurm
PIDS=(/run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid)

say() { echo "slurm_localhost: $*"; }
die() { echo "slurm_localhost: $1" >&2; exit "${2:-1}"; }

case "$action" in up|down|status) ;; *) die "usage: $0 [up|status|down]" 2 ;; esac

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    exec sudo -n env OFL_SLURM_NO_INSTALL="${OFL_SLURM_NO_INSTALL:-0}" "$0" "$@"
  fi
  die "cannot start SLURM here: needs root or passwordless sudo" 3
fi

ours_up() {  # this script's slurmctld answers and its node can take jobs
  [ -f "$CONF" ] && grep -qF "$MARK" "$CONF" || return 1
  scontrol ping 2>/dev/null | grep -q "is UP" || return 1
  sinfo -h -p debug -o %T 2>/dev/null | grep -Eq '^(idle|mixed|allocated|completing)'
}

stop_pid() {  # stop the daemon whose pid file is $1 (by its pid), wait up to 20 s
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

if [ "$action" = status ]; then
  ours_up && { sinfo; exit 0; }
  die "this script's SLURM is not up" 1
fi

if [ "$action" = down ]; then
  if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    die "$CONF was not written by this script: not stopping someone else's SLURM" 3
  fi
  if scontrol ping 2>/dev/null | grep -q "is UP"; then
    scancel --full --quiet $(squeue -h -o %A 2>/dev/null | sort -u) 2>/dev/null || true
    sleep 1
  fi
  for f in "${PIDS[@]}"; do stop_pid "$f"; done
  say "stopped"
  exit 0
fi

# --- up --------------------------------------------------------------------------------------
if ours_up; then
  say "already up (partition debug, node $(hostname -s))"
  exit 0
fi
if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  die "$CONF exists and was not written by this script: not touching a real SLURM set-up" 3
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v munged >/dev/null || ! command -v sinfo >/dev/null; then
  [ "${OFL_SLURM_NO_INSTALL:-0}" = 1 ] \
    && die "SLURM is not installed (apt-get install slurm-wlm munge, or run $0 as root)" 3
  command -v apt-get >/dev/null 2>&1 \
    || die "cannot install SLURM here: no apt-get (install slurm-wlm and munge by hand)" 3
  say "installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q slurm-wlm munge >/dev/null 2>&1; } \
    || die "apt-get install slurm-wlm munge failed" 1
fi

# munge: the key, its run folder, the daemon
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge /etc/munge
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
    || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  stop_pid /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged --force || die "munged did not start" 1
  for _ in $(seq 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || die "munged does not answer" 1
fi

# slurm.conf: this host is the controller and the only node
host=$(hostname -s)
# GNU nproc answers OMP_NUM_THREADS when it is set (as in the test workers): count the cores
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
mem=$(slurmd -C 2>/dev/null | grep -o 'RealMemory=[0-9]*' | cut -d= -f2 || true)
[ -n "$mem" ] || mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 ))
conf=$(cat <<EOF
$MARK: a single-node SLURM on localhost for tests (re-run it to rewrite; "down" to stop)
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$(( mem / cpus ))
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=30
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)
install -d -m 0755 /etc/slurm
install -d -o slurm -g slurm -m 0755 /var/lib/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd "$LOGS"
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$conf" ]; then
  printf '%s\n' "$conf" > "$CONF"
  # a changed configuration: restart whatever runs with the old one
  stop_pid /run/slurmd.pid
  stop_pid /run/slurmctld.pid
fi

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }
pid_alive /run/slurmctld.pid || slurmctld || die "slurmctld did not start (see $LOGS/slurmctld.log)" 1
for _ in $(seq 40); do scontrol ping 2>/dev/null | grep -q "is UP" && break; sleep 0.5; done
scontrol ping 2>/dev/null | grep -q "is UP" || die "slurmctld does not answer (see $LOGS/slurmctld.log)" 1
pid_alive /run/slurmd.pid || slurmd || die "slurmd did not start (see $LOGS/slurmd.log)" 1

for i in $(seq 60); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null | head -1)
  case "$state" in
    idle|mixed|allocated|completing) say "up: partition debug, node $host ($cpus CPUs, ${mem} MB)"; exit 0 ;;
    down*|drain*|drained*) [ "$i" -gt 4 ] && scontrol update NodeName="$host" State=RESUME 2>/dev/null || true ;;
  esac
  sleep 1
done
die "node $host did not become idle (state: ${state:-?}; see $LOGS/slurmd.log)" 1
