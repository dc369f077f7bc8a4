#!/usr/bin/env bash
# Run a throw-away one-node Slurm cluster (munged + slurmctld + slurmd) on this machine, for
# tests that need real srun/salloc/sbatch. Everything (config, munge key and socket, state,
# spool, logs, pid files) lives under DIR; nothing goes through systemd; only loopback is used.
#
#   scripts/slurm-local.sh start DIR   # install slurm-wlm + munge if missing, start, wait for
#                                      # the node to be idle, print `export SLURM_CONF=...`
#   scripts/slurm-local.sh stop DIR    # cancel this cluster's jobs, stop the three daemons
#                                      # started from DIR (by their pid files only)
#   scripts/slurm-local.sh status DIR  # exit 0 if all three daemons are running
#
#   eval "$(scripts/slurm-local.sh start /tmp/slurm)" && srun -N1 -n4 hostname
#
# Both start and stop are idempotent. Needs root (SlurmUser=root, munged and slurmd as root).
# The node advertises CPUs=max(nproc, SLURM_LOCAL_CPUS) (SlurmdParameters=config_overrides, so
# slurmd does not drain it for having fewer real cores), so `srun -N1 -n4 --ntasks-per-node=4`
# runs on a 2-core machine: Slurm 22.05 refuses --ntasks-per-node above the node's CPUs even
# with --overcommit. The partition is OverSubscribe=FORCE:4, so concurrent jobs share CPUs.
# More tasks than CPUs in one job: pass -O/--overcommit (or SLURM_OVERCOMMIT=1).
# Environment: SLURM_LOCAL_CPUS (minimum CPUs the node advertises, default 4),
#              SLURM_LOCAL_TIMEOUT (seconds per wait, default 60),
#              SLURM_LOCAL_CTLD_PORT / SLURM_LOCAL_SLURMD_PORT (default 6817 / 6818).
set -euo pipefail

TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}
MIN_CPUS=${SLURM_LOCAL_CPUS:-4}
CTLD_PORT=${SLURM_LOCAL_CTLD_PORT:-6817}
SLURMD_PORT=${SLURM_LOCAL_SLURMD_PORT:-6818}

usage() { echo "usage: $0 {start|stop|status} DIR" >&2; exit 2; }
log() { echo "slurm-local: $*" >&2; }
die() { log "$*"; exit 1; }

[ $# -eq 2 ] || usage
CMD=$1
DIR=$2

# proc_is PID NAME: true if process PID is running and its command is NAME.
# (The name check guards against a stale pid file whose pid was reused by something else.)
proc_is() {
  local comm
  comm=$(ps -o comm= -p "$1" 2>/dev/null) || return 1
  [ "$comm" = "$2" ]
}

read_pid() { [ -s "$1" ] && tr -dc '0-9' < "$1"; }

# pid_alive PIDFILE NAME: true if the pid in PIDFILE is a running NAME.
pid_alive() {
  local pid
  pid=$(read_pid "$1") && [ -n "$pid" ] && proc_is "$pid" "$2"
}

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.2 s until it succeeds, or fail
# after SECONDS. (DESCRIPTION only documents the call.)
wait_for() {
  local deadline=$(( $(date +%s) + $1 )); shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# stop_pidfile PIDFILE NAME: TERM the daemon, wait for the pid (not the pid file: the daemons
# remove it before they finish exiting) to go, KILL it if it is still there.
stop_pidfile() {
  local pidfile=$1 name=$2 pid
  if ! pid_alive "$pidfile" "$name"; then rm -f "$pidfile"; return 0; fi
  pid=$(read_pid "$pidfile")
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_for "$TIMEOUT" "$name to exit" eval "! proc_is $pid $name"; then
    log "$name (pid $pid) ignored SIGTERM for ${TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_for 10 "$name to die" eval "! proc_is $pid $name" || die "could not stop $name (pid $pid)"
  fi
  rm -f "$pidfile"
}

case $CMD in
  start) mkdir -p "$DIR" ;;
  stop|status) [ -d "$DIR" ] || { [ "$CMD" = stop ] && exit 0; exit 1; } ;;
  *) usage ;;
esac
DIR=$(cd "$DIR" && pwd)
case $DIR in *[[:space:]]*) die "DIR must not contain whitespace (slurm.conf paths): $DIR" ;; esac
CONF=$DIR/slurm.conf
MUNGE_DIR=$DIR/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
MUNGE_KEY=$MUNGE_DIR/munge.key
MUNGE_PID=$DIR/run/munged.pid
CTLD_PID=$DIR/run/slurmctld.pid
SLURMD_PID=$DIR/run/slurmd.pid
export SLURM_CONF=$CONF

print_env() {
  echo "export SLURM_CONF='$CONF'"
}

all_running() {
  pid_alive "$MUNGE_PID" munged && pid_alive "$CTLD_PID" slurmctld && pid_alive "$SLURMD_PID" slurmd
}

# node_ready: the node has registered and takes jobs. sinfo appends "*" to the state of a node
# that is not responding (e.g. "idle*" before slurmd registers), "~" when powered down, etc.
node_ready() {
  local state
  state=$(sinfo -h -N -n "$NODE" -o %T 2>/dev/null) || return 1
  case $state in idle|mixed|allocated|completing) return 0 ;; *) return 1 ;; esac
}

start() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (SlurmUser=root)"
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
     || ! command -v srun >/dev/null || ! command -v munged >/dev/null; then
    log "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -o DPkg::Lock::Timeout=300 >&2
    apt-get install -y -o DPkg::Lock::Timeout=300 slurm-wlm munge >&2
  fi

  NODE=$(hostname -s)
  if all_running && node_ready; then
    log "already running from $DIR"
    print_env
    return 0
  fi

  # munged insists that every directory above its socket is searchable by all and that the
  # key is not readable by others; slurm's own files can be private.
  chmod 755 "$DIR"
  mkdir -p "$MUNGE_DIR" "$DIR/run" "$DIR/log" "$DIR/state" "$DIR/spool"
  chmod 755 "$MUNGE_DIR"
  if [ ! -s "$MUNGE_KEY" ]; then
    log "creating munge key $MUNGE_KEY"
    (umask 077; head -c 1024 /dev/urandom > "$MUNGE_KEY.tmp")
    mv "$MUNGE_KEY.tmp" "$MUNGE_KEY"
  fi
  chmod 400 "$MUNGE_KEY"

  local cpus
  cpus=$(nproc)
  [ "$cpus" -ge "$MIN_CPUS" ] || cpus=$MIN_CPUS
  cat > "$CONF.tmp" <<EOF
# Written by scripts/slurm-local.sh: one node, loopback only, no cgroups, no accounting.
ClusterName=local
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
PlugStackConfig=$DIR/plugstack.conf
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MailProg=/bin/true
MinJobAge=30
KillWait=5
Waittime=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE OverSubscribe=FORCE:4 State=UP
EOF
  if [ -f "$CONF" ] && ! cmp -s "$CONF.tmp" "$CONF" \
     && { pid_alive "$CTLD_PID" slurmctld || pid_alive "$SLURMD_PID" slurmd; }; then
    log "warning: slurm.conf changed while daemons from $DIR are running; run stop, then start"
  fi
  mv "$CONF.tmp" "$CONF"
  : > "$DIR/plugstack.conf"   # keep /etc/slurm/plugstack.conf (site SPANK plugins) out

  if ! pid_alive "$MUNGE_PID" munged; then
    log "starting munged"
    munged --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" --pid-file="$MUNGE_PID" \
      --log-file="$DIR/log/munged.log" --seed-file="$MUNGE_DIR/munged.seed" --force \
      || die "munged failed to start; see $DIR/log/munged.log"
  fi
  wait_for "$TIMEOUT" munged sh -c "munge -n -S '$MUNGE_SOCKET' | unmunge -S '$MUNGE_SOCKET'" \
    || die "munged does not answer on $MUNGE_SOCKET; see $DIR/log/munged.log"

  if ! pid_alive "$CTLD_PID" slurmctld; then
    log "starting slurmctld"
    slurmctld -f "$CONF" || die "slurmctld failed to start; see $DIR/log/slurmctld.log"
  fi
  wait_for "$TIMEOUT" slurmctld scontrol ping \
    || die "slurmctld does not answer after ${TIMEOUT}s; see $DIR/log/slurmctld.log"

  if ! pid_alive "$SLURMD_PID" slurmd; then
    log "starting slurmd"
    slurmd -f "$CONF" || die "slurmd failed to start; see $DIR/log/slurmd.log"
  fi
  if ! wait_for "$TIMEOUT" "node ready" node_ready; then
    sinfo -N -l >&2 || true
    die "node $NODE not ready after ${TIMEOUT}s; see $DIR/log/slurmctld.log and slurmd.log"
  fi
  log "node $NODE up ($cpus CPUs advertised, $(nproc) real); state in $DIR"
  print_env
}

stop() {
  # Cancel this cluster's jobs first, so that slurmd reaps their slurmstepd processes.
  if pid_alive "$CTLD_PID" slurmctld && [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
    log "cancelling jobs"
    squeue -h -o %i | xargs -r scancel 2>/dev/null || true
    # shellcheck disable=SC2016  # expanded by the inner sh, on each poll
    wait_for "$TIMEOUT" "jobs to end" sh -c '[ -z "$(squeue -h -o %i)" ]' \
      || log "jobs still listed after ${TIMEOUT}s"
  fi
  stop_pidfile "$SLURMD_PID" slurmd
  stop_pidfile "$CTLD_PID" slurmctld
  stop_pidfile "$MUNGE_PID" munged
  log "stopped"
}

case $CMD in
  start) start ;;
  stop) stop ;;
  status) all_running ;;
  *) usage ;;
esac
