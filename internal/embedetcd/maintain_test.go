package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/freeport"
)

// Every goroutine of a member, its loop's too, ends with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// member starts a member whose loop looks every 50 ms (tune changes its
// config), and a client of it; both closed when the test ends.
func member(t *testing.T, tune func(*Config)) (*Server, *clientv3.Client) {
	t.Helper()
	var s *Server
	var err error
	for range 5 {
		cp, err1 := freeport.Get()
		pp, err2 := freeport.Get()
		if err = errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		c := Config{Name: "m", Dir: t.TempDir(), LogLevel: "fatal", tick: 50 * time.Millisecond,
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cp), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", pp)}
		if tune != nil {
			tune(&c)
		}
		if s, err = Start(context.Background(), c); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return s, cli
}

// waitRounds waits until the loop completed n more rounds than now (a
// round that began before the call may have read the member before it).
func waitRounds(t *testing.T, s *Server, n int64) Stats {
	t.Helper()
	want := s.Stats().Rounds + n
	deadline := time.Now().Add(time.Minute)
	for {
		st := s.Stats()
		if st.Rounds >= want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the maintenance loop made %d rounds in a minute, want %d", st.Rounds, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The history older than the retention is compacted, and a file left
// mostly free is defragmented.
func TestMaintenanceCompactsAndDefragments(t *testing.T) {
	s, cli := member(t, func(c *Config) { c.Maintenance = &Maintenance{Retention: 500 * time.Millisecond, Defrag: true} })
	ctx := context.Background()
	big := strings.Repeat("x", 1<<20)
	for i := range 48 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/big/%d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	del, err := cli.Delete(ctx, "/big/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for st := s.Stats(); st.Compacted < del.Header.Revision || st.Defrags == 0; st = s.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %+v, want a compaction at %d or later and a defragmentation", st, del.Header.Revision)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := cli.Get(ctx, "/big/0", clientv3.WithRev(1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a read at revision 1: %v, want ErrCompacted", err)
	}
	if st := s.Stats(); st.DBSize > 8<<20 {
		t.Errorf("the file is %d bytes after the defragmentation, 48 MiB were written and deleted", st.DBSize)
	}
}

// A quota many times smaller than what is written, with the default
// retention (a minute: the retention alone would keep it all): the loop
// compacts under pressure and no write is refused. The writes come in
// bursts of an eighth of the quota, each after the loop looked at the
// last: the loop protects the quota from the writes it has time to see
// (maintain.go), and its pace is not what this checks.
func TestMaintenanceStaysUnderQuota(t *testing.T) {
	const quota = 8 << 20
	s, cli := member(t, func(c *Config) { c.QuotaBytes = quota })
	ctx := context.Background()
	val := strings.Repeat("v", 4<<10)
	written := 0
	for written < 6*quota {
		// A burst: 8 writers, 32 writes of 4 KiB each, to 8 keys.
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for w := range 8 {
			wg.Go(func() {
				for range 32 {
					if _, err := cli.Put(ctx, fmt.Sprintf("/hot/%d", w), val); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("after %d MiB: %v", written>>20, err)
		}
		written += 8 * 32 * len(val)
		// The next burst once the loop looked at this one, and etcd
		// committed its backend since (every 100 ms: the pages a
		// compaction frees are reused only after): at most 10 MiB/s.
		waitRounds(t, s, 2)
		time.Sleep(100 * time.Millisecond)
	}
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(alarms.Alarms) > 0 {
		t.Fatalf("alarms %v", alarms.Alarms)
	}
	st := s.Stats()
	if st.PressureCompactions == 0 || st.DBSize >= quota {
		t.Errorf("%+v: want compactions under pressure and a file under the quota", st)
	}
	t.Logf("wrote %d MiB under a %d MiB quota: %+v", written>>20, quota>>20, st)
}

// Retention 0: nothing is compacted (an audit replays the whole history).
func TestMaintenanceOff(t *testing.T) {
	s, cli := member(t, func(c *Config) { c.Maintenance = &Maintenance{} })
	ctx := context.Background()
	for range 20 {
		if _, err := cli.Put(ctx, "/k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	waitRounds(t, s, 3)
	if _, err := cli.Get(ctx, "/k", clientv3.WithRev(2)); err != nil {
		t.Errorf("a read at revision 2 with compaction off: %v", err)
	}
	if st := s.Stats(); st.Compactions != 0 || st.Quota != DefaultQuotaBytes {
		t.Errorf("%+v: want no compaction and the default quota", st)
	}
}
