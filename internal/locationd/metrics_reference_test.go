package locationd

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/refdoc"
)

// docs/reference/metrics-locationd.md is what a running locationd's
// registry describes (make docs writes it; this fails when it is stale).
func TestMetricsReference(t *testing.T) {
	r := start(t, nil)
	var ms []refdoc.Metric
	// The controllers register theirs as they start: wait for the
	// recovery controller's.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		if ms, err = refdoc.Metrics(r.srv.Registry(), "meshloc_"); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, m := range ms {
			found = found || m.Name == "meshloc_locationd_orphaned_objects"
		}
		if found || time.Now().After(deadline) {
			break
		}
	}
	page := refdoc.MetricsPage("locationd metrics",
		"locationd serves these on `--http` at `/metrics`, beside the Go runtime's and the process's own; its embedded etcd's are on its client port's `/metrics` (etcd's own reference).", ms)
	if err := refdoc.Sync(filepath.Join("..", "..", "docs", "reference", "metrics-locationd.md"), page); err != nil {
		t.Fatal(err)
	}
}
