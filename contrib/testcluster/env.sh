# shellcheck shell=bash
# Defaults for the rlsched real-Slurm test cluster (contrib/testcluster).
#
# Sourced by `up`, `down` and `capture-golden`; you may also source it from an
# interactive shell to get SLURM_CONF and the paths of logs/state:
#
#     . contrib/testcluster/env.sh      # then: sinfo, squeue, tail "$TC_LOG"/slurmctld.log
#
# Every knob keeps a value already present in the environment. Change cluster
# *shape* knobs (NNODES, GPUS, NODES_PER_LEAF, CPUS, ports, ETC, BASE) only
# between `down` and `up`. See README.md for the list.

: "${BASE:=/tmp/rlsched-testcluster}"      # state, logs and pid files live under $BASE/run
: "${ETC:=/etc/slurm}"                     # slurm.conf & friends are written here
: "${CLUSTER:=testcluster}"                # ClusterName, also the accounting cluster
: "${NNODES:=16}"                          # virtual nodes (one slurmd each)
: "${GPUS:=8}"                             # GPUs (gres/gpu) per node; 0 = none
: "${NODES_PER_LEAF:=4}"                   # nodes per leaf switch (topology/tree)
: "${CPUS:=64}"                            # CPUs per node
: "${MEM_MB:=512000}"                      # RealMemory per node (MB)
: "${DEF_MEM_PER_CPU:=4096}"               # DefMemPerCPU (MB) for jobs without --mem
: "${PARTITION:=gpu}"                      # the single (default) partition
: "${RESET:=0}"                            # 1: wipe slurmctld state + accounting DB on `up`
: "${CTLD_PORT:=6817}"                     # SlurmctldPort
: "${DBD_PORT:=6819}"                      # slurmdbd DbdPort
: "${SLURMD_BASE_PORT:=17000}"             # nodeNN listens on SLURMD_BASE_PORT+NN
: "${DBNAME:=slurm_acct_db}"               # MariaDB database (StorageLoc)
: "${DBUSER:=slurm}"                       # MariaDB user slurmdbd connects as
: "${DBPASS:=slurmpass}"                   # ... and its password
: "${MARIADB:=mariadb}"                    # admin client used for CREATE USER / DROP DATABASE
: "${PRIORITY_WEIGHT_AGE:=1000}"
: "${PRIORITY_MAX_AGE:=1-0}"
: "${PRIORITY_WEIGHT_PARTITION:=1000}"
: "${PRIORITY_WEIGHT_FAIRSHARE:=0}"
: "${PRIORITY_WEIGHT_JOBSIZE:=0}"
: "${PRIORITY_WEIGHT_QOS:=0}"
: "${PRIORITY_WEIGHT_ASSOC:=0}"
: "${SCHEDULER_PARAMETERS:=sched_interval=1,bf_interval=1,batch_sched_delay=0,sched_min_interval=0,bf_continue}"
: "${SLURM_CONF_EXTRA:=}"                  # extra lines appended verbatim to slurm.conf
: "${SLURM_DEBUG:=info}"                   # SlurmctldDebug/SlurmdDebug/slurmdbd DebugLevel
: "${WAIT_TIMEOUT:=60}"                    # seconds `up` waits for each daemon / the nodes
: "${STOP_TIMEOUT:=10}"                    # seconds `down` waits after SIGTERM before SIGKILL
: "${INSTALL_PACKAGES:=1}"                 # 0: never call apt-get (fail if something is missing)

TC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${JOB_SUBMIT_LUA:=$TC_DIR/job_submit.lua}"   # script installed as $ETC/job_submit.lua; "none" disables job_submit/lua

TC_RUN=$BASE/run            # everything the cluster writes
TC_LOG=$TC_RUN/log          # daemon logs
TC_PIDS=$TC_RUN/pids        # PIDs of what `up` started (and only that)
export SLURM_CONF=$ETC/slurm.conf
export BASE ETC CLUSTER NNODES GPUS NODES_PER_LEAF CPUS TC_DIR TC_RUN TC_LOG TC_PIDS
