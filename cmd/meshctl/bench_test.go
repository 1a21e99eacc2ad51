package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad bench command lines are usage errors (exit 2) and start nothing.
func TestBenchUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--only", "relocations,nope"}, `--only "nope"`},
		{[]string{"bench", "extra"}, "usage"},
		{[]string{"bench", "--quick=maybe"}, "usage"},
		{[]string{"bench", "--from", "bench_test.go"}, "invalid_argument: --from bench_test.go: bench report"},
		{[]string{"bench", "--from", "no-such-report.json"}, "invalid_argument"},
		{[]string{"bench", "--from", "r.json", "--only", "etcd"}, "takes no"},
		{[]string{"-o", "json", "bench", "--markdown"}, "choose one"},
	} {
		r := meshctl(nil, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// One section of the quick plan, as JSON: the report parses and has the
// section's figures (the full run is internal/bench's TestTinyRun).
func TestBenchOnlyEtcdJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	r := meshctl(nil, "-o", "json", "bench", "--quick", "--only", "etcd", "--dir", t.TempDir())
	if r.code != 0 || !strings.Contains(r.stdout, `"etcd 8-key txn p50"`) || !strings.Contains(r.stdout, `"plan": "quick"`) {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	// The saved report prints again, as Markdown, without measuring.
	saved := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(saved, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	md := meshctl(nil, "bench", "--from", saved, "--markdown")
	if md.code != 0 || !strings.Contains(md.stdout, "| etcd 8-key txn p50 | ") || !strings.HasPrefix(md.stdout, "quick plan, ") {
		t.Fatalf("--from --markdown: exit %d\nstdout %s\nstderr %s", md.code, md.stdout, md.stderr)
	}
}
