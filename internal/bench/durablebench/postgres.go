package durablebench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/meshloc/meshloc/internal/bench/report"
	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/internal/pgserver"
	"github.com/meshloc/meshloc/internal/promscrape"
	"github.com/meshloc/meshloc/pkg/client"
)

// postgres launches a PostgreSQL server, starts a node that keeps durable
// objects' state in it, and measures the write and the wake there, each
// beside its baseline on the same server from this process (one pgx
// connection).
func postgres(ctx context.Context, env Env, p Plan) error {
	srv, end, err := Launch(ctx, "durable", env.Step)
	if err != nil {
		return err
	}
	defer end() // after the node's stop (deferred below) and the connection's close
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		return fmt.Errorf("bench: durable: %w", err)
	}
	defer conn.Close(context.Background())
	web, err := freeport.Addr()
	if err != nil {
		return err
	}
	cl, stop, err := env.StartNode(ctx, "p1", web, "--state-store", srv.DSN(), "--sleep-after", p.SleepAfter.String())
	if err != nil {
		return err
	}
	defer stop()
	m, err := openSeam(ctx, env, srv.DSN())
	if err != nil {
		return err
	}
	defer m.close()
	if err := pgWrites(ctx, env, p, conn, cl, m); err != nil {
		return err
	}
	return pgWakes(ctx, env, p, conn, cl, web, m)
}

// pgWrites measures the durable write on the PostgreSQL node beside a bare
// conditional UPDATE of one row, of as many bytes as a dcounter's row
// holds (its state and meta).
func pgWrites(ctx context.Context, env Env, p Plan, conn *pgx.Conn, cl *client.Client, m *seam) error {
	add := adder(ctx, cl, "actor/dcounter/pg-w")
	if err := warm(add); err != nil {
		return err
	}
	var size int
	if err := conn.QueryRow(ctx, `SELECT octet_length(state) + octet_length(meta::text) FROM meshloc.state WHERE object = $1`,
		"actor/dcounter/pg-w0").Scan(&size); err != nil {
		return fmt.Errorf("bench: durable: the size of a dcounter's row: %w", err)
	}
	payload := make([]byte, size)
	fillRandom(payload, 1)
	if _, err := conn.Exec(ctx, `CREATE TABLE bench_write (id int PRIMARY KEY, version bigint NOT NULL, v bytea);
		INSERT INTO bench_write VALUES (1, 0, NULL)`); err != nil {
		return fmt.Errorf("bench: durable: %w", err)
	}
	var version int64
	update := func(int) error {
		payload[0]++ // a new value each time, as a write's
		tag, err := conn.Exec(ctx, `UPDATE bench_write SET version = version + 1, v = $1 WHERE id = 1 AND version = $2`, payload, version)
		if err != nil {
			return fmt.Errorf("bench: durable: UPDATE baseline: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("bench: durable: the UPDATE baseline lost its own compare (version %d)", version)
		}
		version++
		return nil
	}
	var state []byte
	if err := conn.QueryRow(ctx, `SELECT state FROM meshloc.state WHERE object = $1`, "actor/dcounter/pg-w0").Scan(&state); err != nil {
		return fmt.Errorf("bench: durable: a dcounter's state: %w", err)
	}
	if err := m.claimFresh(ctx, "pg-seam-w", writeObjects); err != nil {
		return err
	}
	env.Step("durable: %d adds to %d awake dcounters on a node with the PostgreSQL store, one caller, in blocks of %d alternating with as many writes of such a change by the store from this process and a conditional UPDATE of a %d-byte row",
		p.Writes, writeObjects, block, size)
	d, err := interleave(p.Writes, block, add, func(i int) error { return m.write(ctx, i, state) }, update)
	if err != nil {
		return err
	}
	writes, stored, updates := d[0], d[1], d[2]
	env.Base(measure(pgUpdate, updates, fmt.Sprintf("UPDATE t SET version=version+1, v=$1 WHERE id=1 AND version=$2, v of %d bytes (a dcounter's state and meta); pgx, one connection", size)))
	env.Fig(measure(pgStoreWrite, stored, fmt.Sprintf("p99 %.2f ms; postgres.Store.Persist from this process: the state, the reply's row, the evicted replies' delete", ms(pct(stored, 99)))),
		pgUpdate, report.AtMost(bound))
	w := measure(pgWrite, writes, fmt.Sprintf("p99 %.2f ms; the store's write and the call's path (see the memory counter's add)", ms(pct(writes, 99))))
	env.Fig(w, pgUpdate, nil)
	env.Fig(w, etcdWrite, nil) // the two stores side by side
	return nil
}

// pgWakes fills Wakes dblobs of StateBytes, waits until the node hosts
// none (all asleep), then wakes each with one call, alternating with a
// SELECT of a StateBytes row of the same server.
func pgWakes(ctx context.Context, env Env, p Plan, conn *pgx.Conn, cl *client.Client, web string, m *seam) error {
	env.Step("durable: %d dblobs of %d bytes filled on the PostgreSQL node; as many rows of %d bytes in a table beside", p.Wakes, StateBytes, StateBytes)
	name := func(i int) string { return "actor/dblob/pg-wake-" + strconv.Itoa(i) }
	for i := range p.Wakes {
		if _, err := cl.Call(ctx, name(i), "fill", strconv.Itoa(StateBytes), strconv.Itoa(i)); err != nil {
			return fmt.Errorf("bench: durable: fill %s: %w", name(i), err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE bench_read (id int PRIMARY KEY, v bytea NOT NULL)`); err != nil {
		return fmt.Errorf("bench: durable: %w", err)
	}
	row := make([]byte, StateBytes)
	for i := range p.Wakes {
		fillRandom(row, uint64(i)+2) // random, as a blob's: PostgreSQL compresses neither
		if _, err := conn.Exec(ctx, `INSERT INTO bench_read VALUES ($1, $2)`, i, row); err != nil {
			return fmt.Errorf("bench: durable: %w", err)
		}
	}
	if err := m.claimFresh(ctx, "pg-seam-r", p.Wakes); err != nil {
		return err
	}
	for i := range p.Wakes {
		fillRandom(row, uint64(i)+1000)
		if err := m.write(ctx, i, row); err != nil {
			return err
		}
	}
	env.Step("durable: waiting until the node hosts no object (--sleep-after %s)", p.SleepAfter)
	if err := waitAsleep(ctx, web, p.SleepAfter*4+time.Minute); err != nil {
		return err
	}
	env.Step("durable: %d calls, each waking one of the sleeping dblobs, alternating with a claim of a %d-byte state by the store from this process and a SELECT of one %d-byte row", p.Wakes, StateBytes, StateBytes)
	want := fmt.Sprintf(`"size":%d`, StateBytes)
	wake := func(i int) error {
		r, err := cl.Call(ctx, name(i), "size")
		if err != nil {
			return fmt.Errorf("bench: durable: wake %s: %w", name(i), err)
		}
		if !strings.Contains(string(r.Payload), want) {
			return fmt.Errorf("bench: durable: %s woke with %s, want %s", name(i), r.Payload, want)
		}
		return nil
	}
	read := func(i int) error {
		var v []byte
		if err := conn.QueryRow(ctx, `SELECT v FROM bench_read WHERE id = $1`, i).Scan(&v); err != nil {
			return fmt.Errorf("bench: durable: SELECT baseline: %w", err)
		}
		if len(v) != StateBytes {
			return fmt.Errorf("bench: durable: the SELECT baseline read %d bytes, want %d", len(v), StateBytes)
		}
		return nil
	}
	d, err := interleave(p.Wakes, 1, wake, func(i int) error { return m.load(ctx, i, StateBytes) }, read)
	if err != nil {
		return err
	}
	wakes, loads, reads := d[0], d[1], d[2]
	env.Base(measure(pgRead, reads, "SELECT v FROM t WHERE id=$1, a different row each time; pgx, one connection"))
	env.Fig(measure(pgStoreLoad, loads, fmt.Sprintf("p99 %.2f ms; postgres.Store.Load from this process under a new fence: the claim (a committed UPDATE), the state, the replies",
		ms(pct(loads, 99)))), pgRead, report.AtMost(bound))
	env.Fig(measure(pgWake, wakes, fmt.Sprintf("p99 %.2f ms; a different object each time: the record's read and wake in etcd, the store's claim and read, the restore, the call",
		ms(pct(wakes, 99)))), pgRead, nil)
	return nil
}

// Launch starts a PostgreSQL server for a bench section (named in its
// steps and errors) from the machine's binaries (Check), with Settings, in
// a temporary directory; end stops it and removes the directory. Not
// under the run's directory: as root the server runs as nobody, who must
// be able to reach it (pgserver), and a short path keeps its Unix socket
// under the length limit.
func Launch(ctx context.Context, section string, step func(format string, a ...any)) (srv *pgserver.Server, end func(), err error) {
	if err := Check(); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "meshloc-bench-pg-")
	if err != nil {
		return nil, nil, err
	}
	step("%s: launching PostgreSQL from %s in %s", section, pgserver.Bin(), dir)
	if srv, err = pgserver.Launch(ctx, dir, Settings...); err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("bench: %s: %w", section, err)
	}
	return srv, func() { srv.Stop(); os.RemoveAll(dir) }, nil
}

// Settings undo pgserver's settings for tests: a commit is on disk
// when acknowledged, as in production and as etcd's writes are (the etcd
// CAS beside the etcd store's write is fsynced).
var Settings = []string{"fsync=on", "synchronous_commit=on", "full_page_writes=on"}

// fillRandom fills b with bytes of a ChaCha8 stream of seed: the same
// bytes every run, and none that compress.
func fillRandom(b []byte, seed uint64) {
	var key [32]byte
	key[0] = byte(seed)
	key[1] = byte(seed >> 8)
	_, _ = rand.NewChaCha8(key).Read(b)
}

// waitAsleep waits until the node serving HTTP at web hosts no object
// (its meshloc_hosted_objects), at most within.
func waitAsleep(ctx context.Context, web string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n, err := promscrape.Sum(ctx, web, "meshloc_hosted_objects")
		if err == nil && n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: durable: the node hosts %.0f objects after %s, want none asleep (%v)", n, within, err)
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
