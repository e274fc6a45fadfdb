-- rlsched job_submit/lua script: an initial SiteFactor for each new job, from the helper.
--
-- Does what contrib/testcluster/job_submit.lua does (accept every job, fail open) and,
-- on submission, asks the rlsched helper (rlsched helper run, with hint_socket set) over
-- a local Unix socket for the job's initial site factor:
--
--   request  "v1 nodes=N cpus=N gpus=N mem_mb=N limit_s=N uid=N\n"  (numbers only)
--   reply    "<integer>\n", or the connection closed without a reply (no advice)
--
-- Only numbers read from the job descriptor are sent; no job string (name, comment,
-- script, paths) ever leaves this script. The whole exchange has a hard timeout
-- (TIMEOUT, 50 ms). On timeout, error, no advice or anything but a plain integer, the
-- job is accepted unchanged (slurm.SUCCESS). After a timeout or a connection error the
-- helper is not asked again for BACKOFF seconds, so a hung helper costs slurmctld at
-- most one TIMEOUT per BACKOFF.
--
-- Runs inside slurmctld under its locks: no Slurm command is ever called from here.
-- Needs lua-socket (Debian: apt install lua-socket); without it, it only accepts jobs.
-- Install: copy to the directory of slurm.conf as job_submit.lua and set
-- JobSubmitPlugins=lua (Slurm re-reads the file when its mtime changes).
-- Slurm adds its NICE_OFFSET itself when job_desc.site_factor is set here: write the
-- plain value.

local SOCKET_PATH = "/run/rlsched/hint.sock"   -- the helper's hint_socket
local TIMEOUT = 0.05                            -- seconds for connect + send + receive
local BACKOFF = 30                              -- seconds without asking after a failure
local LIMIT = 2000000000                        -- refuse replies beyond +-LIMIT

local NO_VAL = 4294967294                       -- Slurm's "not set" for 32-bit fields

local have_unix, unix = pcall(require, "socket.unix")
local have_socket, socket = pcall(require, "socket")
local skip_until = 0

local function now()
    if have_socket and type(socket) == "table" and socket.gettime then
        return socket.gettime()
    end
    return os.time()
end

local function new_stream()
    -- luasocket >= 3.0: socket.unix is a table with stream(); older: the module is callable
    if type(unix) == "table" and type(unix.stream) == "function" then
        return unix.stream()
    end
    return unix()
end

-- a non-negative integer below max, or nil (NO_VAL, INFINITE, nil, NaN...)
local function count(v, max)
    if type(v) ~= "number" or v ~= v or v < 0 or v >= max then
        return nil
    end
    return math.floor(v)
end

-- total GPUs in a TRES string such as "gres/gpu:4", "gres:gpu:a100:2,gres/fpga:1"
local function gpus_in(s)
    if type(s) ~= "string" or #s > 1024 then
        return nil
    end
    local total
    for spec in string.gmatch(s, "[^,]+") do
        if string.find(spec, "gpu", 1, true) then
            local n = string.match(spec, ":(%d+)$")
            total = (total or 0) + (n and tonumber(n) or 1)
        end
    end
    return total
end

local function request_line(job_desc)
    local parts = { "v1" }
    local nodes = count(job_desc.min_nodes, 1000000)
    if nodes and nodes < 1 then nodes = nil end
    if nodes then parts[#parts + 1] = "nodes=" .. nodes end
    local cpus = count(job_desc.min_cpus, 1000000000)
    if cpus and cpus > 0 then parts[#parts + 1] = "cpus=" .. cpus end
    local gpus = gpus_in(job_desc.tres_per_job)
    if not gpus then
        local per_node = gpus_in(job_desc.tres_per_node)
        if per_node then gpus = per_node * (nodes or 1) end
    end
    if gpus and gpus > 0 and gpus < 1000000 then parts[#parts + 1] = "gpus=" .. gpus end
    local mem = count(job_desc.min_mem_per_node, 1000000000000)
    if mem then
        mem = mem * (nodes or 1)
    else
        local per_cpu = count(job_desc.min_mem_per_cpu, 1000000000000)
        if per_cpu and cpus then mem = per_cpu * cpus end
    end
    if mem and mem > 0 and mem < 1000000000000 then parts[#parts + 1] = "mem_mb=" .. mem end
    local minutes = count(job_desc.time_limit, NO_VAL)
    if minutes and minutes > 0 then parts[#parts + 1] = "limit_s=" .. (minutes * 60) end
    local uid = count(job_desc.user_id, NO_VAL)
    if uid then parts[#parts + 1] = "uid=" .. uid end
    return table.concat(parts, " ") .. "\n"
end

-- returns value, or nil and "no advice" / an error
local function ask(line)
    local deadline = now() + TIMEOUT
    local c = new_stream()
    c:settimeout(TIMEOUT)
    local ok, err = c:connect(SOCKET_PATH)
    if not ok then
        c:close()
        return nil, err or "connect failed"
    end
    local left = deadline - now()
    if left <= 0 then c:close(); return nil, "timeout" end
    c:settimeout(left)
    ok, err = c:send(line)
    if not ok then c:close(); return nil, err or "send failed" end
    left = deadline - now()
    if left <= 0 then c:close(); return nil, "timeout" end
    c:settimeout(left)
    local reply, rerr = c:receive("*l")
    c:close()
    if not reply then
        if rerr == "closed" then return nil, "no advice" end
        return nil, rerr or "receive failed"
    end
    if #reply > 11 or not string.match(reply, "^%-?%d+$") then
        return nil, "garbage"
    end
    local value = tonumber(reply)
    if not value or value < -LIMIT or value > LIMIT then
        return nil, "garbage"
    end
    return value
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    if not have_unix or now() < skip_until then
        return slurm.SUCCESS
    end
    local ok, value, why = pcall(function()
        return ask(request_line(job_desc))
    end)
    if ok and value then
        pcall(function() job_desc.site_factor = value end)
    elseif not ok or (why ~= "no advice" and why ~= "garbage") then
        -- the helper is down, slow or broken: leave it alone for a while
        skip_until = now() + BACKOFF
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
