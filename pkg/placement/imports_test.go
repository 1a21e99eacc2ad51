package placement

import (
	"os/exec"
	"strings"
	"testing"
)

// docs/contributing.md: a pure core imports no network, clock, goroutine,
// context, randomness or etcd package, directly or not.
func TestImports(t *testing.T) {
	deps, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	banned := map[string]bool{"net": true, "context": true, "time": true, "sync": true, "os": true, "math/rand": true, "math/rand/v2": true}
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \"\\n\"}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		if banned[imp] || strings.HasPrefix(imp, "net/") {
			t.Errorf("pkg/placement imports %s", imp)
		}
	}
	for _, d := range strings.Fields(string(deps)) {
		if strings.HasPrefix(d, "go.etcd.io/") || strings.HasPrefix(d, "google.golang.org/grpc") {
			t.Errorf("pkg/placement depends on %s", d)
		}
	}
}
