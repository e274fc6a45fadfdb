-- Default job_submit/lua script of rlsched's test cluster (contrib/testcluster).
-- `up` installs it as $ETC/job_submit.lua (JobSubmitPlugins=lua); point the
-- JOB_SUBMIT_LUA env var at another script to plug in your own, or set
-- JOB_SUBMIT_LUA=none to run without job_submit/lua.
--
-- It does nothing and accepts everything (fail-open): any script used here runs
-- inside slurmctld under its locks, must stay millisecond-fast, must never call
-- Slurm commands, and must return slurm.SUCCESS on every failure.
-- Slurm 22.05 reloads this file by itself when its mtime changes.

function slurm_job_submit(job_desc, part_list, submit_uid)
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
