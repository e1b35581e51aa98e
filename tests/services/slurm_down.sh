#!/usr/bin/env bash
# Stop exactly what slurm_up.sh started (reverse order): jobs first, then TERM, then KILL after 10 s.
set -uo pipefail
BASE=${1:?usage: slurm_down.sh BASE}
[ -d "$BASE" ] || exit 0
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $st != Z* ]]; }
export SLURM_CONF=$BASE/slurm/etc/slurm.conf
# (no slurm.conf yet: nothing to ask; scontrol without one looks for a controller for a minute)
if [ -s "$SLURM_CONF" ] && scontrol ping >/dev/null 2>&1; then
  ids=$(squeue -h -o %i 2>/dev/null); [ -n "$ids" ] && scancel $ids 2>/dev/null
fi
stop() {
  local pid=$1
  [ -n "${pid:-}" ] && alive "$pid" || return 0
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
  alive "$pid" && kill -9 "$pid" 2>/dev/null
}
[ -f "$BASE/pids" ] && tac "$BASE/pids" | while read -r name pid; do stop "$pid"; done
# also whatever an interrupted start left behind: our own pid files and our private MariaDB
for f in "$BASE"/*.pid "$BASE"/slurm/run/*.pid; do [ -s "$f" ] && stop "$(cat "$f")"; done
for pid in $(pgrep -f "datadir=$BASE/mysql/data" 2>/dev/null); do stop "$pid"; done
: > "$BASE/pids"
