# shellcheck shell=bash
# Helpers shared by `up`, `down` and `capture-golden` (sourced after env.sh).
#
# PID files: $TC_PIDS/<name>.pid holds one line "PID PROGRAM" for every
# process `up` started itself (munged, mariadbd, slurmdbd, slurmctld,
# slurmd.nodeNN). `down` stops exactly those and nothing else.

TC_T0=${TC_T0:-$(date +%s%N)}

tc_elapsed() { # seconds since the script started, one decimal
    local ns=$(( $(date +%s%N) - TC_T0 ))
    printf '%d.%d' $(( ns / 1000000000 )) $(( ns / 100000000 % 10 ))
}
tc_log() { printf '[%s %5ss] %s\n' "${TC_PROG:-testcluster}" "$(tc_elapsed)" "$*"; }
tc_die() { printf '%s: ERROR: %s\n' "${TC_PROG:-testcluster}" "$*" >&2; exit 1; }

tc_require_root() {
    if [ "$(id -u)" != 0 ]; then
        printf '%s: ERROR: must run as root (%s); try: sudo %s\n' \
            "${TC_PROG:-testcluster}" "${1:-it manages the test cluster daemons}" "$0" >&2
        exit 1
    fi
}

# State letter of a process (R, S, D, Z, X, ...) or nothing if it does not exist.
# Field 3 of /proc/PID/stat, parsed after the last ')' (comm may hold spaces).
tc_pid_state() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    printf '%s' "${stat%% *}"
}

# tc_pid_alive PID [PROGRAM]: the process exists, is not a zombie/dead, and
# (if PROGRAM is given) its argv[0] ends in PROGRAM (guards against PID reuse).
tc_pid_alive() {
    local pid=$1 prog=${2:-} st argv0
    [ -n "$pid" ] || return 1
    st=$(tc_pid_state "$pid")
    case "$st" in ''|Z|X|x) return 1 ;; esac
    if [ -n "$prog" ]; then
        argv0=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | head -n 1) || return 1
        [ "${argv0##*/}" = "$prog" ] || return 1
    fi
    return 0
}

# tc_alive NAME: the process recorded in $TC_PIDS/NAME.pid is alive.
tc_alive() {
    local f=$TC_PIDS/$1.pid pid prog
    [ -f "$f" ] || return 1
    read -r pid prog < "$f" || true
    tc_pid_alive "$pid" "$prog"
}
tc_pid_of() { local pid _p; read -r pid _p < "$TC_PIDS/$1.pid" 2>/dev/null && printf '%s' "$pid"; }

# tc_start NAME PROGRAM LOGFILE CMD...: start CMD in the background in its own
# session (no TTY, stdin from /dev/null) and record its PID as NAME.
# The script runs without job control, so setsid does not fork and $! is the
# daemon's own PID.
tc_start() {
    local name=$1 prog=$2 logf=$3; shift 3
    setsid "$@" >>"$logf" 2>&1 </dev/null &
    echo "$! $prog" > "$TC_PIDS/$name.pid"
}

# tc_stop TIMEOUT NAME...: SIGTERM the recorded processes, wait up to TIMEOUT
# seconds, then SIGKILL what is left (slurmd ignores SIGTERM while it cannot
# reach slurmctld). Removes the PID files. Prints the names it stopped.
tc_stop() {
    local timeout=$1; shift
    local name pid prog pids=() names=() left end
    for name in "$@"; do
        [ -f "$TC_PIDS/$name.pid" ] || continue
        read -r pid prog < "$TC_PIDS/$name.pid" || true
        if tc_pid_alive "$pid" "$prog"; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid"); names+=("$name")
        fi
        rm -f "$TC_PIDS/$name.pid"
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    end=$(( $(date +%s%N) + timeout * 1000000000 ))
    while :; do
        left=()
        for pid in "${pids[@]}"; do tc_pid_alive "$pid" && left+=("$pid"); done
        [ ${#left[@]} -eq 0 ] && break
        if [ "$(date +%s%N)" -ge "$end" ]; then
            kill -KILL "${left[@]}" 2>/dev/null || true
            end=$(( $(date +%s%N) + 5000000000 ))
            while :; do
                local still=()
                for pid in "${left[@]}"; do tc_pid_alive "$pid" && still+=("$pid"); done
                [ ${#still[@]} -eq 0 ] && break
                [ "$(date +%s%N)" -ge "$end" ] && { echo "WARNING: still alive after SIGKILL: ${still[*]}" >&2; break; }
                sleep 0.1
            done
            tc_log "SIGKILLed ${#left[@]} process(es) that ignored SIGTERM for ${timeout}s" >&2
            break
        fi
        sleep 0.1
    done
    printf '%s\n' "${names[@]}"
}

# tc_wait_for SECONDS WHAT CMD...: poll CMD every 0.2 s until it succeeds.
tc_wait_for() {
    local limit=$1 what=$2; shift 2
    local end=$(( $(date +%s) + limit ))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$end" ] && { tc_log "TIMEOUT (${limit}s) waiting for $what" >&2; return 1; }
        sleep 0.2
    done
}

# PID listening on a TCP port (empty if none).
tc_port_pid() {
    ss -Htlnp "sport = :$1" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1
}

tc_node_names() { # node01 node02 ...
    local i w=${#NNODES}
    [ "$w" -lt 2 ] && w=2
    for i in $(seq 1 "$NNODES"); do printf 'node%0*d\n' "$w" "$i"; done
}

# PIDs of this cluster's slurmstepd processes (recognised by an open fd on a
# log file in $TC_LOG) and of all their descendants (the jobs' processes).
# Job steps outlive slurmd by design; after a RESET nothing owns them any more.
tc_step_pids() {
    local p pid stat ppid steps=() queue=() k
    declare -A kids=()
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        stat=$(cat "$p/stat" 2>/dev/null) || continue
        stat=${stat##*) }; stat=${stat#* }; ppid=${stat%% *}
        kids[$ppid]+=" $pid"
        if [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ]; then
            for k in "$p"/fd/*; do
                case "$(readlink "$k" 2>/dev/null)" in "$TC_LOG"/*) steps+=("$pid"); break ;; esac
            done
        fi
    done
    queue=("${steps[@]}")
    while [ ${#queue[@]} -gt 0 ]; do
        pid=${queue[0]}; queue=("${queue[@]:1}")
        echo "$pid"
        for k in ${kids[$pid]:-}; do queue+=("$k"); done
    done
}
