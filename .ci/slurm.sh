#!/usr/bin/env bash
# A real two-node Slurm cluster on this one host for the cluster-validation tests:
# munge, slurmctld, and one slurmd per node (`slurmd -N n1`, `-N n2`), every node at
# NodeAddr=127.0.0.1 on its own port. Idempotent: installs what is missing, (re)writes the config
# only when it changed, starts only daemons that are not running, and waits until n[1-2] are idle.
# The config lives in $ENVBUILD_SLURM_DIR (default /var/lib/envbuild-slurm); point SLURM_CONF at
# $ENVBUILD_SLURM_DIR/slurm.conf to use it (the tests do).
# Usage: bash .ci/slurm.sh [start|stop|status]
set -euo pipefail
dir=${ENVBUILD_SLURM_DIR:-/var/lib/envbuild-slurm}
conf=$dir/slurm.conf
nodes=(n1 n2)
port=${ENVBUILD_SLURM_PORT:-17000}  # slurmctld's; the nodes' are the next two (a second cluster
                                    # on this host, e.g. a worktree's, takes another base)
export SLURM_CONF=$conf

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop() {
  for n in "${nodes[@]}"; do
    alive "$dir/slurmd-$n.pid" && kill "$(cat "$dir/slurmd-$n.pid")" || true
  done
  alive "$dir/slurmctld.pid" && kill "$(cat "$dir/slurmctld.pid")" || true
  echo "slurm stopped"
}

case "${1:-start}" in
  stop) stop; exit 0 ;;
  status) SLURM_CONF=$conf sinfo -h -o '%N %T' 2>&1; exit 0 ;;
esac

need=()
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || need+=(munge)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# munge: a key (the package makes one; make it if not) and a running daemon as user munge
if [ ! -s /etc/munge/munge.key ]; then
  (command -v mungekey >/dev/null && mungekey --create --keyfile=/etc/munge/munge.key) \
    || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

host=$(hostname -s)
mkdir -p "$dir/state" "$dir/log"
new=$(cat <<EOF
# written by .ci/slurm.sh (envbuild tests): two nodes on one host
ClusterName=envbuild
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/linear
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=5
MinJobAge=120
InactiveLimit=0
SlurmdTimeout=60
MessageTimeout=10
GresTypes=gpu
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1)) CPUs=1 Gres=gpu:tesla_v100:2 Features=driver-535.183.01 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 2)) CPUs=1 Gres=gpu:nvidia_h100_80gb_hbm3:4 Features=driver-580.126.20 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
)
# GPU GRES types that `envbuild fleet collect --slurm` reads. There is no GPU here: slurmd drops
# a GPU without device files, so each node's "GPUs" are links to /dev/null under $dir/dev
# (AutoDetect=off; TaskPlugin=task/none constrains no device). Jobs that ask for no GRES run as
# before. A node's driver is named by a `driver-VERSION` feature, the convention fleet collect
# reads (Slurm does not know the driver).
mkdir -p "$dir/dev"
for i in 0 1 2 3; do ln -sfn /dev/null "$dir/dev/nvidia$i"; done
gres=$(cat <<EOF
# written by .ci/slurm.sh (envbuild tests): GPU types over stand-in device files
AutoDetect=off
NodeName=n1 Name=gpu Type=tesla_v100 File=$dir/dev/nvidia[0-1]
NodeName=n2 Name=gpu Type=nvidia_h100_80gb_hbm3 File=$dir/dev/nvidia[0-3]
EOF
)
changed=0
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$new" ]; then
  printf '%s\n' "$new" >"$conf"
  changed=1
fi
if [ ! -f "$dir/gres.conf" ] || [ "$(cat "$dir/gres.conf")" != "$gres" ]; then
  printf '%s\n' "$gres" >"$dir/gres.conf"
  changed=1
fi
[ "$changed" = 1 ] && stop >/dev/null

alive "$dir/slurmctld.pid" || slurmctld -f "$conf"
for n in "${nodes[@]}"; do
  mkdir -p "$dir/spool-$n"
  alive "$dir/slurmd-$n.pid" || slurmd -f "$conf" -N "$n"
done

# wait for both nodes to register; a node left DOWN by an earlier run is resumed
for i in $(seq 150); do
  states=$(sinfo -h -N -o '%N %T' 2>/dev/null || true)
  if [ "$(grep -cE ' (idle|mixed|allocated)' <<<"$states")" = "${#nodes[@]}" ]; then
    echo "slurm ready: $(tr '\n' ' ' <<<"$states")(SLURM_CONF=$conf)"
    exit 0
  fi
  if [ $((i % 20)) = 0 ] && grep -qE ' (down|drain)' <<<"$states"; then
    scontrol update nodename="n[1-2]" state=resume 2>/dev/null || true
  fi
  sleep 0.2
done
echo "slurm did not come up: $states" >&2
tail -5 "$dir"/log/*.log >&2 || true
exit 1
