package node_test

import (
	"path/filepath"
	"testing"

	"github.com/meshloc/meshloc/internal/refdoc"
)

// docs/reference/metrics-meshnode.md is what a started node's registry
// describes (make docs writes it; this fails when it is stale).
func TestMetricsReference(t *testing.T) {
	m := startMesh(t, 1)
	ms, err := refdoc.Metrics(m.regs[m.nodes[0]], "meshloc_")
	if err != nil {
		t.Fatal(err)
	}
	page := refdoc.MetricsPage("meshnode metrics",
		"Every meshnode (and every program of `pkg/meshnode`) serves these on `--http` at `/metrics`, each with the constant label `node` (its `--name`), beside the Go runtime's and the process's own (`go_*`, `process_*`).", ms)
	if err := refdoc.Sync(filepath.Join("..", "..", "docs", "reference", "metrics-meshnode.md"), page); err != nil {
		t.Fatal(err)
	}
}
