package locationd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/api"
)

// metricLine waits (a minute at most) until /metrics has a line starting
// with prefix, and returns it.
func metricLine(t *testing.T, r *running, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, _, body := rawGet(t, "GET", r.base+"/metrics")
		for line := range strings.Lines(string(body)) {
			if strings.HasPrefix(line, prefix) {
				return strings.TrimSpace(line)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics has no line %s…", prefix)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMetric waits (a minute at most) until /metrics has exactly line.
func waitMetric(t *testing.T, r *running, line string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	name, _, _ := strings.Cut(line, " ")
	for {
		got := metricLine(t, r, name+" ")
		if got == line {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics: %q, want %q", got, line)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// While etcd's NOSPACE alarm is on, /readyz fails saying so and what to do
// (reads still work: the old /readyz said ok), the metric and GET /v1/etcd
// say so; once disarmed, all is well again.
func TestEtcdNoSpaceReadyz(t *testing.T) {
	r := start(t, nil)
	cli := r.etcd(t)
	if status, _, body := rawGet(t, "GET", r.base+"/readyz"); status != 200 {
		t.Fatalf("/readyz before the alarm: %d %s", status, body)
	}
	var st api.EtcdStatus
	if _, _, body := rawGet(t, "GET", r.base+"/v1/etcd"); json.Unmarshal(body, &st) != nil || !st.Embedded || len(st.Members) != 1 ||
		st.Members[0].QuotaBytes != embedetcd.DefaultQuotaBytes || st.Compaction.Auto != "on" || st.Compaction.Retention != "1m0s" || len(st.Alarms) != 0 {
		t.Fatalf("/v1/etcd: %s", body)
	}

	id := etcdtest.RaiseNoSpace(t, cli)
	status, _, body := rawGet(t, "GET", r.base+"/readyz")
	var e api.ErrorBody
	if status != 503 || json.Unmarshal(body, &e) != nil || e.Error.Code != "unavailable" ||
		!strings.Contains(e.Error.Message, "NOSPACE") || !strings.Contains(e.Error.Message, "alarm disarm") {
		t.Errorf("/readyz under NOSPACE: %d %s", status, body)
	}
	waitMetric(t, r, `meshloc_etcd_alarm{type="NOSPACE"} 1`)
	_, _, body = rawGet(t, "GET", r.base+"/v1/etcd")
	st = api.EtcdStatus{}
	if json.Unmarshal(body, &st) != nil || len(st.Alarms) != 1 || st.Alarms[0].Type != "NOSPACE" ||
		st.Alarms[0].Member != fmt.Sprintf("%x", id) || !strings.Contains(st.Hint, "alarm disarm") {
		t.Errorf("/v1/etcd under NOSPACE: %s", body)
	}

	etcdtest.DisarmNoSpace(t, cli)
	if status, _, body := rawGet(t, "GET", r.base+"/readyz"); status != 200 {
		t.Errorf("/readyz after the alarm: %d %s", status, body)
	}
	waitMetric(t, r, `meshloc_etcd_alarm{type="NOSPACE"} 0`)
}

// With an external etcd nothing compacts, locationd says so (a warning and
// meshloc_etcd_auto_compaction_off); once something compacts it, it says
// that too.
func TestExternalEtcdCompaction(t *testing.T) {
	ext := etcdtest.SingleWith(t, func(c *embedetcd.Config) { c.Maintenance = &embedetcd.Maintenance{} })
	r := start(t, func(c *Config) { c.EtcdEndpoints = []string{ext.Endpoint()} }, func(s *Server) {
		s.compaction = compactionCheck{every: 20 * time.Millisecond, window: 0, minGrowth: 50}
	})
	cli := r.etcd(t)
	ctx := context.Background()
	write := func(n int) int64 {
		var rev int64
		for i := range n {
			resp, err := cli.Put(ctx, "/other/k", fmt.Sprint(i))
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		}
		return rev
	}
	write(100)
	waitMetric(t, r, "meshloc_etcd_auto_compaction_off 1")
	var st api.EtcdStatus
	if _, _, body := rawGet(t, "GET", r.base+"/v1/etcd"); json.Unmarshal(body, &st) != nil || st.Embedded || st.Compaction.Auto != "off" {
		t.Errorf("/v1/etcd of an etcd that does not compact: %s", body)
	}
	rev := write(10)
	if _, err := cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, r, "meshloc_etcd_auto_compaction_off 0")
	waitMetric(t, r, fmt.Sprintf("meshloc_etcd_compacted_revision %d", rev))
}

// The judgement of an external etcd's compaction, as a timeline.
func TestCompactionWatch(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	minute := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	for _, tc := range []struct {
		name string
		obs  [][3]int64 // minute, revision, compacted
		want []string
	}{
		{"never compacted, written", [][3]int64{{0, 100, 0}, {30, 20_000, 0}, {75, 40_000, 0}}, []string{autoUnknown, autoUnknown, autoOff}},
		{"never compacted, idle", [][3]int64{{0, 100, 0}, {80, 5_000, 0}, {200, 9_000, 0}}, []string{autoUnknown, autoUnknown, autoUnknown}},
		{"compacts hourly", [][3]int64{{0, 100, 50}, {60, 30_000, 20_000}, {120, 60_000, 50_000}, {190, 90_000, 50_000}},
			[]string{autoUnknown, autoOn, autoOn, autoOn}},
		{"stops compacting", [][3]int64{{0, 100, 50}, {5, 1_000, 900}, {80, 40_000, 900}, {90, 50_000, 45_000}},
			[]string{autoUnknown, autoOn, autoOff, autoOn}},
	} {
		w := newCompactionWatch(defaultCompactionCheck)
		for i, o := range tc.obs {
			if got, _ := w.observe(minute(int(o[0])), o[1], o[2]); got != tc.want[i] {
				t.Errorf("%s: observation %d (minute %d): %s, want %s", tc.name, i, o[0], got, tc.want[i])
			}
		}
	}
}

// compactedRevision reads etcd's compacted revision: 0, then the one
// compacted at.
func TestCompactedRevision(t *testing.T) {
	ext := etcdtest.SingleWith(t, func(c *embedetcd.Config) { c.Maintenance = &embedetcd.Maintenance{} })
	cli := etcdtest.Client(t, ext.Endpoint())
	ctx := context.Background()
	if got, err := compactedRevision(ctx, cli, "/meshloc/x"); err != nil || got != 0 {
		t.Fatalf("before any compaction: %d %v", got, err)
	}
	var resp *clientv3.PutResponse
	for range 5 {
		var err error
		if resp, err = cli.Put(ctx, "/k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision-1); err != nil {
		t.Fatal(err)
	}
	if got, err := compactedRevision(ctx, cli, "/meshloc/x"); err != nil || got != resp.Header.Revision-1 {
		t.Fatalf("after a compaction at %d: %d %v", resp.Header.Revision-1, got, err)
	}
}
