// burst: a load generator for connection pooling. It opens many client connections up front
// (mostly idle, like an application fleet's connection pools) and keeps a fixed number of them
// busy at any moment, each running a short burst of queries back to back.
//
// One line of results goes to stdout; progress and errors go to stderr. The line "connected ..."
// on stderr says that every client connection is open (bench/pool.sh samples the proxy's memory
// then, during -hold). The exit status is non-zero when any query or connection failed.
//
//	burst -setup -dsn 'u:p@tcp(127.0.0.1:3306)/db' -rows 10000   # create and fill burst_t
//	burst -dsn 'u:p@tcp(127.0.0.1:3306)/db' -clients 2000 -active 100 -duration 20s
//
// See bench/README.md ("Connection pooling").
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

const defaultQuery = "SELECT c FROM burst_t WHERE id=?"

var (
	dsnFlag    = flag.String("dsn", "", "user:pass@tcp(host:port)/db (go-sql-driver/mysql DSN)")
	clients    = flag.Int("clients", 2000, "client connections opened up front and kept open")
	active     = flag.Int("active", 100, "clients running a burst at any moment")
	duration   = flag.Duration("duration", 20*time.Second, "measured load time (after -warmup)")
	warmup     = flag.Duration("warmup", 3*time.Second, "load before measuring, not counted")
	hold       = flag.Duration("hold", 0, "after connecting every client, stay idle this long before the load")
	burstN     = flag.Int("burst", 20, "queries per burst, back to back on one client connection")
	query      = flag.String("query", defaultQuery, "the query; each ? gets a random id in 1..-rows")
	ps         = flag.Bool("ps", false, "server-side prepared statements (one per client, prepared on first use) instead of the text protocol with interpolateParams=true")
	rows       = flag.Int("rows", 10000, "rows in burst_t (-setup creates them; the load picks ids in 1..rows)")
	setup      = flag.Bool("setup", false, "create and fill burst_t (-rows rows), then exit")
	connectPar = flag.Int("connect-parallel", 32, "connections opened concurrently during the connect phase")
	connectTO  = flag.Duration("connect-timeout", 60*time.Second, "limit for the whole connect phase")
)

func fatalf(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "burst: "+format+"\n", a...)
	os.Exit(code)
}

// --- latency histogram: log-linear buckets (128 per power of two, < 0.8 % error), in ns ---

const subBits = 7
const sub = 1 << subBits

type hist struct {
	counts [64 * sub]uint64
	n      uint64
	max    uint64
	sum    uint64
}

func bucketOf(v uint64) int {
	if v < sub {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // v>>e is in [sub, 2*sub)
	return (e+1)*sub + int(v>>e) - sub
}

// mid is the middle of bucket i's range.
func mid(i int) uint64 {
	if i < sub {
		return uint64(i)
	}
	e := i/sub - 1
	lo := uint64(i%sub+sub) << e
	return lo + (uint64(1)<<e)/2
}

func (h *hist) add(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile q (0..1) in µs.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return float64(min(mid(i), h.max)) / 1e3
		}
	}
	return float64(h.max) / 1e3
}

// --- clients ---------------------------------------------------------------------------

type client struct {
	conn *sql.Conn
	stmt *sql.Stmt // -ps: prepared on first use, kept
}

// idlePool holds the clients not running a burst; take picks one at random.
type idlePool struct {
	mu   sync.Mutex
	idle []*client
}

func (p *idlePool) take(ctx context.Context) *client {
	for {
		p.mu.Lock()
		if n := len(p.idle); n > 0 {
			i := rand.IntN(n)
			c := p.idle[i]
			p.idle[i] = p.idle[n-1]
			p.idle = p.idle[:n-1]
			p.mu.Unlock()
			return c
		}
		p.mu.Unlock()
		select { // only when clients were dropped after errors
		case <-ctx.Done():
			return nil
		case <-time.After(time.Millisecond):
		}
	}
}

func (p *idlePool) put(c *client) {
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

var nArgs int

// run executes the query once on c and reads every row.
func (c *client) run(ctx context.Context) error {
	args := make([]any, nArgs)
	for i := range args {
		args[i] = rand.IntN(*rows) + 1
	}
	var rs *sql.Rows
	var err error
	if *ps {
		if c.stmt == nil {
			if c.stmt, err = c.conn.PrepareContext(ctx, *query); err != nil {
				return fmt.Errorf("prepare: %w", err)
			}
		}
		rs, err = c.stmt.QueryContext(ctx, args...)
	} else {
		rs, err = c.conn.QueryContext(ctx, *query, args...)
	}
	if err != nil {
		return err
	}
	cols, err := rs.Columns()
	if err != nil {
		rs.Close()
		return err
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	n := 0
	for rs.Next() {
		if err := rs.Scan(ptrs...); err != nil {
			rs.Close()
			return err
		}
		n++
	}
	if err := rs.Close(); err != nil {
		return err
	}
	if err := rs.Err(); err != nil {
		return err
	}
	if *query == defaultQuery && n != 1 {
		return fmt.Errorf("%d rows for one id (is burst_t filled with -setup -rows %d?)", n, *rows)
	}
	return nil
}

func openDB(n int) *sql.DB {
	cfg, err := mysql.ParseDSN(*dsnFlag)
	if err != nil {
		fatalf(2, "bad -dsn: %v", err)
	}
	cfg.InterpolateParams = !*ps
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 60 * time.Second // a query that hangs fails instead of stalling the run
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 60 * time.Second
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		fatalf(2, "bad -dsn: %v", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db
}

func doSetup(ctx context.Context) {
	db := openDB(1)
	defer db.Close()
	t0 := time.Now()
	stmts := []string{
		"DROP TABLE IF EXISTS burst_t",
		"CREATE TABLE burst_t (id INT NOT NULL PRIMARY KEY, c CHAR(120) NOT NULL) ENGINE=InnoDB",
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			fatalf(1, "setup: %s: %v", s, err)
		}
	}
	const batch = 1000
	var b strings.Builder
	for lo := 1; lo <= *rows; lo += batch {
		b.Reset()
		b.WriteString("INSERT INTO burst_t (id, c) VALUES ")
		for id := lo; id < lo+batch && id <= *rows; id++ {
			if id > lo {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%d,'%0120d')", id, rand.Int64())
		}
		if _, err := db.ExecContext(ctx, b.String()); err != nil {
			fatalf(1, "setup: insert: %v", err)
		}
	}
	fmt.Printf("setup rows=%d ms=%d\n", *rows, time.Since(t0).Milliseconds())
}

func main() {
	flag.Parse()
	if flag.NArg() > 0 {
		fatalf(2, "unexpected arguments: %v", flag.Args())
	}
	if *dsnFlag == "" {
		fatalf(2, "-dsn is required")
	}
	if *rows < 1 || *clients < 1 || *active < 1 || *burstN < 1 || *connectPar < 1 || *duration <= 0 || *warmup < 0 || *hold < 0 {
		fatalf(2, "-rows, -clients, -active, -burst, -connect-parallel and -duration must be > 0, -warmup and -hold >= 0")
	}
	if *active > *clients {
		fatalf(2, "-active (%d) must not exceed -clients (%d)", *active, *clients)
	}
	nArgs = strings.Count(*query, "?")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *setup {
		doSetup(ctx)
		return
	}

	// --- connect phase: every client opened and pinged, or fail ---
	db := openDB(*clients)
	defer db.Close()
	all := make([]*client, *clients)
	t0 := time.Now()
	cctx, ccancel := context.WithTimeout(ctx, *connectTO)
	var next, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < min(*connectPar, *clients); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= *clients {
					return
				}
				c, err := db.Conn(cctx)
				if err == nil {
					if err = c.PingContext(cctx); err != nil {
						c.Close()
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				all[i] = &client{conn: c}
			}
		}()
	}
	wg.Wait()
	ccancel()
	connectDur := time.Since(t0)
	if f := failed.Load(); f > 0 {
		fatalf(1, "connected only %d of %d clients in %v; first error: %v", int64(*clients)-f, *clients, connectDur.Round(time.Millisecond), firstErr.Load())
	}
	if open := db.Stats().OpenConnections; open != *clients {
		fatalf(1, "%d connections open, expected %d", open, *clients)
	}
	fmt.Fprintf(os.Stderr, "connected clients=%d connect_ms=%d\n", *clients, connectDur.Milliseconds())

	if *hold > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(*hold):
		}
	}
	if ctx.Err() != nil {
		fatalf(1, "interrupted")
	}

	// --- load: -active workers, each runs bursts on random idle clients ---
	pool := &idlePool{idle: append([]*client(nil), all...)}
	start := time.Now()
	recStart := start.Add(*warmup)
	end := recStart.Add(*duration)
	lctx, lcancel := context.WithDeadline(ctx, end.Add(30*time.Second)) // queries in flight at the end get 30 s
	defer lcancel()
	hists := make([]*hist, *active)
	var errCount, bursts, dropped atomic.Int64
	var errLog sync.Mutex
	errShown := 0
	for w := range *active {
		h := &hist{}
		hists[w] = h
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && lctx.Err() == nil {
				c := pool.take(lctx)
				if c == nil {
					return
				}
				bt := time.Now()
				ok := true
				for q := 0; q < *burstN; q++ {
					t := time.Now()
					if !t.Before(end) {
						break
					}
					err := c.run(lctx)
					if err == nil && !t.Before(recStart) {
						h.add(time.Since(t))
					}
					if err != nil {
						if lctx.Err() != nil && ctx.Err() != nil {
							return // interrupted
						}
						errCount.Add(1)
						errLog.Lock()
						if errShown < 5 {
							fmt.Fprintf(os.Stderr, "burst: query error: %v\n", err)
							errShown++
						}
						errLog.Unlock()
						ok = false
						break
					}
				}
				if !bt.Before(recStart) {
					bursts.Add(1)
				}
				if ok {
					pool.put(c)
				} else {
					dropped.Add(1) // a client whose query failed is not used again
				}
			}
		}()
	}
	wg.Wait()
	measured := time.Since(recStart)
	if measured > *duration {
		measured = *duration // queries are only started before end
	}
	if ctx.Err() != nil {
		fatalf(1, "interrupted")
	}

	total := &hist{}
	for _, h := range hists {
		total.merge(h)
	}
	for _, c := range all {
		if c.stmt != nil {
			c.stmt.Close()
		}
		c.conn.Close()
	}
	mode := "text"
	if *ps {
		mode = "ps"
	}
	mean := 0.0
	if total.n > 0 {
		mean = float64(total.sum) / float64(total.n) / 1e3
	}
	fmt.Printf("clients=%d active=%d burst=%d mode=%s duration_s=%.2f queries=%d bursts=%d qps=%.1f mean_us=%.0f p50_us=%.0f p95_us=%.0f p99_us=%.0f max_us=%.0f errors=%d dropped_clients=%d connect_ms=%d\n",
		*clients, *active, *burstN, mode, measured.Seconds(), total.n, bursts.Load(),
		float64(total.n)/measured.Seconds(), mean, total.quantile(0.50), total.quantile(0.95),
		total.quantile(0.99), float64(total.max)/1e3, errCount.Load(), dropped.Load(), connectDur.Milliseconds())
	if errCount.Load() > 0 {
		os.Exit(1)
	}
}
