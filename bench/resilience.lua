-- wrk script of bench/resilience.sh.
--
-- Requests carry X-User-Id (1024 ids in turn, formatted once), the key of balance: hash.
-- Answers are counted by status: wrk's own "Non-2xx or 3xx responses" leaves 3xx out. The
-- first 1000 answers that are not 2xx are kept with the time they came (epoch ms). done()
-- prints "status CODE COUNT" and "fail CODE EPOCH_MS" lines after wrk's summary.
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

function init(args)
	statuses = {}
	fails = {}
	formatted = {}
	for i = 1, 1024 do
		formatted[i] = wrk.format(nil, nil, { ["X-User-Id"] = "user-" .. i })
	end
	next_id = 0
end

function request()
	next_id = next_id % #formatted + 1
	return formatted[next_id]
end

function response(status, headers, body)
	statuses[status] = (statuses[status] or 0) + 1
	if (status < 200 or status > 299) and #fails < 1000 then
		table.insert(fails, { status, now_ms() })
	end
end

function done()
	for _, thread in ipairs(threads) do
		for status, count in pairs(thread:get("statuses")) do
			io.write(string.format("status %d %d\n", status, count))
		end
		for _, f in ipairs(thread:get("fails")) do
			io.write(string.format("fail %d %d\n", f[1], f[2]))
		end
	end
end
