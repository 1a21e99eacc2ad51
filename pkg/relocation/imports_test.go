package relocation

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// docs/contributing.md: the protocol core imports no network, clock,
// goroutine, context or etcd package. Direct imports are checked exactly; the
// transitive closure must hold no etcd and no gRPC transport (the standard
// library and the uuid package reach net for their own reasons, which this
// package never calls).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \"\\n\"}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	banned := map[string]bool{"net": true, "context": true, "time": true, "sync": true, "os": true, "math/rand": true, "math/rand/v2": true}
	for _, imp := range strings.Fields(string(out)) {
		if banned[imp] || strings.HasPrefix(imp, "net/") || strings.HasPrefix(imp, "go.etcd.io/") || imp == "google.golang.org/grpc" {
			t.Errorf("pkg/relocation imports %s", imp)
		}
	}
	deps, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(deps)) {
		if strings.HasPrefix(d, "go.etcd.io/") || d == "google.golang.org/grpc" {
			t.Errorf("pkg/relocation depends on %s", d)
		}
	}
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, _ := os.ReadFile(f)
		src := string(b)
		for _, bad := range []string{"time.Now", "go func", "time.Sleep", "time.After"} {
			if strings.Contains(src, bad) {
				t.Errorf("%s uses %s", f, bad)
			}
		}
	}
}
