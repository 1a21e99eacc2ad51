package postgres_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/meshloc/meshloc/internal/pgtest"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/statestore"
)

// durable are the settings of a production server: a commit is on disk
// when acknowledged (pgtest's defaults turn that off for speed).
var durable = []string{"fsync=on", "synchronous_commit=on", "full_page_writes=on"}

// interleaved runs a and b n times each in blocks of 50 in turn (a burst
// of load from elsewhere falls on both) and reports their p50s and ratio.
func interleaved(b *testing.B, n int, an, bn string, fa, fb func(i int) error) {
	var da, db []time.Duration
	for len(da) < n {
		for _, f := range []struct {
			run func(int) error
			out *[]time.Duration
		}{{fa, &da}, {fb, &db}} {
			for range 50 {
				i := len(*f.out)
				t0 := time.Now()
				if err := f.run(i); err != nil {
					b.Fatal(err)
				}
				*f.out = append(*f.out, time.Since(t0))
			}
		}
	}
	p50 := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2].Microseconds()) }
	b.ReportMetric(p50(da), an+"-p50-µs")
	b.ReportMetric(p50(db), bn+"-p50-µs")
	b.ReportMetric(p50(da)/p50(db), an+"/"+bn)
}

// BenchmarkWrite is the store's write of a small change with its reply
// (as a counter's add persists) beside a bare conditional UPDATE of a row
// of the same size on the same server: what the store adds to the one
// statement a write needs.
//
//	go test -run - -bench Write -benchtime 1x ./pkg/statestore/postgres/
func BenchmarkWrite(b *testing.B) {
	f := newFixture(b, pgtest.Start(b, durable...))
	conn, err := pgx.Connect(f.ctx, f.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(f.ctx)
	if _, err := conn.Exec(f.ctx, `CREATE TABLE bench_write (id int PRIMARY KEY, version bigint NOT NULL, v bytea);
		INSERT INTO bench_write VALUES (1, 0, NULL)`); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 248)
	var version int64
	update := func(int) error {
		payload[0]++
		_, err := conn.Exec(f.ctx, `UPDATE bench_write SET version = version + 1, v = $1 WHERE id = 1 AND version = $2`, payload, version)
		version++
		return err
	}
	obj := keyspace.Actor("dcounter", "hot")
	fe := fence(1, 1)
	rd, err := f.s.Load(f.ctx, statestore.Claim{Object: obj, Fence: fe, Fresh: true})
	if err != nil {
		b.Fatal(err)
	}
	ver := rd.StateVersion
	write := func(i int) error {
		seq := uint64(i + 1)
		v := value(obj, fe, seq, fmt.Appendf(nil, `{"v":1,"n":%d}`, seq))
		req := authority.PersistRequest{Object: obj, Fence: fe, StoreVersion: 1, StateVersion: ver, Value: v.Encode(), State: &v,
			Reply:           &authority.StateReply{ID: fmt.Sprintf("%032x", seq), Value: authority.ReplyValue{Payload: fmt.Appendf(nil, `{"n":%d}`, seq)}},
			KeepRepliesFrom: fmt.Sprintf("%032x", max(1, int(seq)-16))}
		res, err := f.s.Persist(f.ctx, req)
		if err == nil && res.Outcome != authority.PersistWritten {
			err = fmt.Errorf("write %d: %s", seq, res.Outcome)
		}
		ver = res.StateVersion
		return err
	}
	for b.Loop() {
		interleaved(b, 2000, "write", "update", write, update)
	}
}

// BenchmarkLoad is a claim of a sleeping object's 1 MiB state beside a
// SELECT of a 1 MiB row of the same server.
//
//	go test -run - -bench Load -benchtime 1x ./pkg/statestore/postgres/
func BenchmarkLoad(b *testing.B) {
	f := newFixture(b, pgtest.Start(b, durable...))
	conn, err := pgx.Connect(f.ctx, f.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(f.ctx)
	const objects = 50
	big := make([]byte, 1<<20)
	if _, err := conn.Exec(f.ctx, `CREATE TABLE bench_read (id int PRIMARY KEY, v bytea NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	name := func(i int) keyspace.Object { return keyspace.Actor("dblob", fmt.Sprint("b", i%objects)) }
	for i := range objects {
		for j := range big {
			big[j] = byte(j*7919 + i*131 + j>>9) // no run PostgreSQL could compress much
		}
		if _, err := conn.Exec(f.ctx, `INSERT INTO bench_read VALUES ($1, $2)`, i, big); err != nil {
			b.Fatal(err)
		}
		rd, err := f.s.Load(f.ctx, statestore.Claim{Object: name(i), Fence: fence(1, 1), Fresh: true})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := f.write(name(i), fence(1, 1), rd.StateVersion, 1, big); err != nil || res.Outcome != authority.PersistWritten {
			b.Fatal(err, res.Outcome)
		}
	}
	claims := int64(1)
	load := func(i int) error {
		if i%objects == 0 {
			claims++ // a new owner for each round of wakes
		}
		rd, err := f.s.Load(f.ctx, statestore.Claim{Object: name(i), Fence: fence(1, claims)})
		if err == nil && len(rd.Value.State) != len(big) {
			err = fmt.Errorf("loaded %d bytes", len(rd.Value.State))
		}
		return err
	}
	sel := func(i int) error {
		var v []byte
		err := conn.QueryRow(f.ctx, `SELECT v FROM bench_read WHERE id = $1`, i%objects).Scan(&v)
		if err == nil && len(v) != len(big) {
			err = fmt.Errorf("selected %d bytes", len(v))
		}
		return err
	}
	for b.Loop() {
		interleaved(b, 500, "load", "select", load, sel)
	}
}
