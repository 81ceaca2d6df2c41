-- wrk script of bench/resilience.sh.
--
-- Requests carry X-User-Id (1024 ids in turn, formatted once), the key of balance: hash.
-- Answers are counted by status: wrk's own "Non-2xx or 3xx responses" leaves 3xx out. The
-- first 1000 answers that are not 2xx are kept with the time they came (epoch ms). done()
-- prints "status CODE COUNT" and "fail CODE EPOCH_MS" lines after wrk's summary.
--
-- done() reads each thread's globals with thread:get, which copies a nested table wrongly
-- (wrk crashes, then "invalid key to 'next'"): a thread keeps only strings and numbers there.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock, bench_timespec *ts);
]]
local CLOCK_REALTIME = 0
local ts = ffi.new("bench_timespec")

local function now_ms()
	ffi.C.clock_gettime(CLOCK_REALTIME, ts)
	return tonumber(ts.tv_sec) * 1000 + math.floor(tonumber(ts.tv_nsec) / 1000000)
end

local threads = {}

function setup(thread)
	table.insert(threads, thread)
end

local formatted = {}
local counter_of = {}           -- status -> the name of its global counter
local next_id = 0
local nfails = 0

function init(args)
	seen = ""                   -- the statuses answered so far: " 200 502"
	fail_lines = ""             -- "fail CODE EPOCH_MS\n" lines
	for i = 1, 1024 do
		formatted[i] = wrk.format(nil, nil, { ["X-User-Id"] = "user-" .. i })
	end
end

function request()
	next_id = next_id % #formatted + 1
	return formatted[next_id]
end

function response(status, headers, body)
	local name = counter_of[status]
	if name == nil then
		name = "status_" .. status
		counter_of[status] = name
		seen = seen .. " " .. status
		_G[name] = 0
	end
	_G[name] = _G[name] + 1
	if (status < 200 or status > 299) and nfails < 1000 then
		nfails = nfails + 1
		fail_lines = fail_lines .. string.format("fail %d %d\n", status, now_ms())
	end
end

function done()
	for _, thread in ipairs(threads) do
		for code in string.gmatch(thread:get("seen"), "%d+") do
			io.write(string.format("status %s %d\n", code, thread:get("status_" .. code)))
		end
		io.write(thread:get("fail_lines"))
	end
end
