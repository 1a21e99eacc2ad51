package pgserver

import (
	"os/exec"
	"strings"
	"testing"
)

// A binary may import this package: it must not bring in testing (the
// wrappers that need testing.TB are internal/pgtest's).
func TestDoesNotImportTesting(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if d == "testing" || strings.HasPrefix(d, "testing/") {
			t.Errorf("internal/pgserver depends on %s", d)
		}
	}
}
