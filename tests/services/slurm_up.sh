#!/usr/bin/env bash
# A real Slurm 22.05 (Debian 12 packages) on this host for the connector tests: munged, MariaDB +
# slurmdbd (so sacct works), slurmctld, N slurmd (fake nodes node01..NN, one port each) and
# slurmrestd with JWT on 127.0.0.1. No systemd here: every daemon is started by hand and its PID
# recorded in $BASE/pids for slurm_down.sh. Prints nothing on success but the env file's path.
#
#   bash tests/services/slurm_up.sh BASE        (a directory of this run's own)
#   source $BASE/env.sh                          (SLURM_CONF, SLURMRESTD_URL, SLURMRESTD_TOKEN)
#
# Everything is this run's: its directory, its ports (SLURM_CTLD_PORT, SLURM_DBD_PORT,
# SLURM_REST_PORT, SLURM_DB_PORT, SLURM_NODE_PORT .. + NODES - 1, chosen free by the caller), its
# own munged on its own socket: two runs on one host do not meet. It installs nothing: the packages
# come from .ci/run (or the admin); a missing one is an error naming it.
#
# Traps this avoids (measured on these machines): slurmrestd refuses root (-u drops privileges);
# SLURM_JWT must never be exported where sbatch/srun run (the job inherits it and srun fails), so
# the token is exported as SLURMRESTD_TOKEN; slurmdbd.conf must be owned by SlurmUser, mode 600;
# PID 1 reaps orphans lazily, so "alive" means "exists and is not a zombie".
set -euo pipefail
BASE=${1:?usage: slurm_up.sh BASE}
NODES=${SLURM_NODES:-4}
CLUSTER=${SLURM_CLUSTER:-ci}
REST_PORT=${SLURM_REST_PORT:-6820}
DB_PORT=${SLURM_DB_PORT:-33061}
CTLD_PORT=${SLURM_CTLD_PORT:-6817}
DBD_PORT=${SLURM_DBD_PORT:-6819}
NODE_PORT=${SLURM_NODE_PORT:-17001}
S=$BASE/slurm
log() { echo "[slurm_up] $*" >&2; }
fail() { echo "[slurm_up] ERROR: $*" >&2; exit 1; }
until_ok() { local n=$1; shift; for _ in $(seq 1 $((n * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
daemon() { # daemon NAME LOG CMD...: a non-forking process in its own session, PID recorded
  local name=$1 out=$2; shift 2
  setsid sh -c 'echo $$ > "$0"; exec "$@"' "$BASE/$name.pid" "$@" </dev/null >"$out" 2>&1 &
  until_ok 5 test -s "$BASE/$name.pid" || fail "$name did not start"
  echo "$name $(cat "$BASE/$name.pid")" >> "$BASE/pids"
}

[ "$(id -u)" = 0 ] || fail "needs root"
# a previous run's daemons would hold the ports and files: stop them first
bash "$(dirname "$0")/slurm_down.sh" "$BASE"
for cmd in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge slurmrestd:slurmrestd \
           slurmdbd:slurmdbd mariadbd:mariadb-server; do
  command -v "${cmd%%:*}" >/dev/null || [ -x "/usr/sbin/${cmd%%:*}" ] || fail "${cmd%%:*} is not installed (package ${cmd##*:})"
done
mkdir -p "$BASE" "$S"/{etc,state,spool,log,run,rest,hook}
# the shipped completion hook, installed as an admin would (its attribution-hook.conf is written by
# the test that points it at a service; without one the hook only logs that it is not configured)
install -m 0755 "$(dirname "$0")/../../deployments/slurm/attribution-hook" "$S/hook/attribution-hook"
chown slurm:slurm "$S/hook"
: > "$BASE/pids"
chown -R slurm:slurm "$S/state" "$S/log" "$S/run"

# munge: this run's own daemon, key and socket (the host's, if any, is left alone)
MU=$BASE/munge
install -d -o munge -g munge -m 0700 "$MU" "$MU/run"
chmod 0755 "$MU" "$MU/run"   # the socket's directory must be reachable by slurm and the job users
[ -s "$MU/munge.key" ] || { dd if=/dev/urandom of="$MU/munge.key" bs=1024 count=1 status=none
  chown munge:munge "$MU/munge.key"; chmod 0400 "$MU/munge.key"; }
MUNGE_SOCKET=$MU/run/munge.socket
runuser -u munge -- /usr/sbin/munged --socket="$MUNGE_SOCKET" --key-file="$MU/munge.key" \
  --pid-file="$MU/run/munged.pid" --log-file="$MU/munged.log" --seed-file="$MU/munged.seed"
until_ok 5 sh -c "munge -S '$MUNGE_SOCKET' -n | unmunge -S '$MUNGE_SOCKET'" || fail "munge does not work: $(tail -3 "$MU/munged.log")"
echo "munged $(cat "$MU/run/munged.pid")" >> "$BASE/pids"

# configuration: daemons on loopback only when the host name resolves there
if getent ahostsv4 "$(hostname)" | awk '{print $1; exit}' | grep -q '^127\.'; then
  BIND="CommunicationParameters=NoInAddrAny,NoCtldInAddrAny"
else
  BIND=""
fi
[ -s "$S/etc/jwt.key" ] || dd if=/dev/urandom of="$S/etc/jwt.key" bs=32 count=1 status=none
chown slurm:slurm "$S/etc/jwt.key"; chmod 0600 "$S/etc/jwt.key"
LAST=$(printf '%02d' "$NODES")
cat > "$S/etc/slurm.conf" <<EOF
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=slurm
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$S/etc/jwt.key
$BIND
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
SelectType=select/cons_tres
MpiDefault=none
MailProg=/bin/true
ReturnToService=1
SlurmdParameters=config_overrides
SlurmdTimeout=30
MinJobAge=3600
KillWait=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MUNGE_SOCKET
JobCompType=jobcomp/script
JobCompLoc=$S/hook/attribution-hook
NodeName=node[01-$LAST] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$NODE_PORT-$((NODE_PORT + NODES - 1))] CPUs=8 RealMemory=2000   # oversubscribed on purpose: tests run several jobs at once
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$S/etc/slurm.conf

# MariaDB in a private data directory, then slurmdbd
M=$BASE/mysql
# a fresh accounting database every start: slurmctld -c restarts job ids at 1, and stale records of
# an earlier run under the same ids would answer sacct
rm -rf "$M/data"
mkdir -p "$M/run"; chown -R mysql:mysql "$M"
mariadb-install-db --user=mysql --datadir="$M/data" --auth-root-authentication-method=socket \
  --skip-test-db >"$M/install.log" 2>&1 || fail "mariadb-install-db failed: $(tail -3 "$M/install.log")"
daemon mariadbd "$M/out.log" mariadbd --no-defaults --user=mysql --datadir="$M/data" --socket="$M/run/sock" \
  --bind-address=127.0.0.1 --port="$DB_PORT" --innodb-buffer-pool-size=128M --innodb-log-file-size=64M \
  --innodb-lock-wait-timeout=900 --log-error="$M/error.log"
until_ok 30 mariadb-admin --socket="$M/run/sock" ping || fail "mariadbd not ready"
mariadb --socket="$M/run/sock" -u root -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
cat > "$S/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdPort=$DBD_PORT
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$S/etc/jwt.key
DbdHost=localhost
SlurmUser=slurm
LogFile=$S/log/slurmdbd.log
PidFile=$S/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
$BIND
EOF
chown slurm:slurm "$S/etc/slurmdbd.conf"; chmod 0600 "$S/etc/slurmdbd.conf"
/usr/sbin/slurmdbd
until_ok 30 test -s "$S/run/slurmdbd.pid" || fail "slurmdbd did not start: $(tail -3 "$S/log/slurmdbd.log")"
echo "slurmdbd $(cat "$S/run/slurmdbd.pid")" >> "$BASE/pids"
until_ok 30 sacctmgr -n list cluster || fail "slurmdbd does not answer"
sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true

# controller and N nodes
/usr/sbin/slurmctld -c   # -c: start from a clean state (no nodes left DOWN by an earlier run)
until_ok 30 scontrol ping || fail "slurmctld does not answer: $(tail -3 "$S/log/slurmctld.log")"
echo "slurmctld $(cat "$S/run/slurmctld.pid")" >> "$BASE/pids"
for i in $(seq 1 "$NODES"); do
  n=node$(printf '%02d' "$i"); mkdir -p "$S/spool/$n"
  /usr/sbin/slurmd -N "$n"
  until_ok 15 test -s "$S/run/slurmd-$n.pid" || fail "slurmd $n did not start (port $((NODE_PORT + i - 1))): $(tail -3 "$S/log/slurmd-$n.log" 2>/dev/null)"
  echo "slurmd-$n $(cat "$S/run/slurmd-$n.pid")" >> "$BASE/pids"
done
until_ok 30 sh -c "[ \$(sinfo -h -N -t idle -o %N | sort -u | wc -l) -ge $NODES ]" || fail "nodes not idle: $(sinfo)"

# REST with JWT (the caller's token is forwarded: SLURM_JWT=daemon only in slurmrestd's own env)
id slurmrest >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin slurmrest 2>/dev/null \
  || id slurmrest >/dev/null 2>&1 || fail "cannot create the slurmrest user"
daemon slurmrestd "$S/log/slurmrestd.log" env SLURM_JWT=daemon slurmrestd -u slurmrest -a rest_auth/jwt \
  -s openapi/v0.0.38,openapi/dbv0.0.38 "127.0.0.1:$REST_PORT"
TOKEN=$(scontrol token username=root lifespan=86400 | sed 's/^SLURM_JWT=//')
until_ok 15 curl -sf -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $TOKEN" \
  "http://127.0.0.1:$REST_PORT/slurm/v0.0.38/ping" || fail "slurmrestd does not answer"
mkdir -p "$S/jobs"; chmod 0777 "$S/jobs"
cat > "$BASE/env.sh" <<EOF
export SLURM_CONF=$S/etc/slurm.conf
export SLURM_TEST_JOBDIR=$S/jobs
export SLURMRESTD_URL=http://127.0.0.1:$REST_PORT
export SLURMRESTD_USER=root
export SLURMRESTD_TOKEN=$TOKEN
export SLURM_HOOK_DIR=$S/hook
EOF
echo "$BASE/env.sh"
