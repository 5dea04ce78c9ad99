-- bench/causal_read.lua (sysbench): one event is a write and then a read of the row it wrote,
-- each in autocommit. Through sluice's read/write split the write goes to the primary and the
-- read to a replica, after the causal-reads check (bench/split.sh compares causal_reads off,
-- local and global: the difference in event latency is what causal reads cost a read that
-- follows a write). Uses sysbench's sbtest tables (oltp_* prepare).

sysbench.cmdline.options = {
	tables = { "Number of tables", 1 },
	table_size = { "Rows per table", 10000 },
}

function thread_init()
	drv = sysbench.sql.driver()
	con = drv:connect()
end

function thread_done()
	con:disconnect()
end

function event()
	local t = sysbench.rand.uniform(1, sysbench.opt.tables)
	local id = sysbench.rand.uniform(1, sysbench.opt.table_size)
	con:query(string.format("UPDATE sbtest%d SET k = k + 1 WHERE id = %d", t, id))
	con:query(string.format("SELECT k FROM sbtest%d WHERE id = %d", t, id))
end
