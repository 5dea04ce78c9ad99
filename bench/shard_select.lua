#!/usr/bin/env sysbench
-- bench/shard_select.lua: one `/* NNN */ select 'test' from dual` per event, text protocol
-- (COM_QUERY), no tables. NNN is --shard, zero-padded to three digits: the leading comment is
-- what the shard-routing query rules of bench/rules.sh match on.
--
--   sysbench bench/shard_select.lua --shard=199 --mysql-host=127.0.0.1 --mysql-port=6033 \
--     --mysql-user=sbtest --mysql-password=... --threads=16 --time=20 run
--
-- Connection options are sysbench's usual --mysql-* ones (see `sysbench --help`).

sysbench.cmdline.options = {
   shard = {"shard number put in the query's leading comment, 0-999", 0},
}

local query

function thread_init()
   local shard = tonumber(sysbench.opt.shard)
   if shard == nil or shard < 0 or shard > 999 or shard ~= math.floor(shard) then
      error("--shard must be a whole number from 0 to 999, not '" .. tostring(sysbench.opt.shard) .. "'")
   end
   query = string.format("/* %03d */ select 'test' from dual", shard)
   drv = sysbench.sql.driver()
   con = drv:connect()
end

function event()
   con:query(query)
end

function thread_done()
   con:disconnect()
end
