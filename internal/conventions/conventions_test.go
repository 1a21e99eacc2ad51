package conventions

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var root = filepath.Join("..", "..")

// walkGo calls f for every non-test Go file of the repository that is not
// generated, by its path relative to the root.
func walkGo(t *testing.T, f func(rel string, src []byte)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "build" || d.Name() == "tools") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		f(rel, src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Small files: no hand-written Go file over 700 lines.
func TestFileSizes(t *testing.T) {
	walkGo(t, func(rel string, src []byte) {
		if n := bytes.Count(src, []byte("\n")); n > 700 {
			t.Errorf("%s has %d lines: split it (at most 700)", rel, n)
		}
	})
}

// Packages split by capability: no package (a directory's non-test,
// non-generated Go files) over 5,000 lines. pkg/node composes packages of
// its own (pkg/node/internal/hosted, routing, drain, ...) instead of
// growing past it.
func TestPackageSizes(t *testing.T) {
	lines := map[string]int{}
	walkGo(t, func(rel string, src []byte) { lines[filepath.Dir(rel)] += bytes.Count(src, []byte("\n")) })
	for dir, n := range lines {
		if n > 5000 {
			t.Errorf("package %s has %d lines of non-test Go: split a capability out of it (at most 5,000)", dir, n)
		}
	}
}

// Every package says what it owns: go doc prints a package comment.
func TestPackageDocs(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{if .Doc}}doc{{end}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 1 {
			t.Errorf("package %s has no package comment", f[0])
		}
	}
}

// Faults and planted bugs live only in test builds, at the seams: outside
// this package, no Go file a production build compiles may use this package.
// Every non-test file that imports it must carry the build constraint
// `failpoints` (the seam wrappers: pkg/node/faults_on.go,
// pkg/*/planted_on.go, ...). The verification harnesses (internal/chaos,
// test/, meshctl verify) plant bugs in the processes they start and in
// their own workload clients, and are exempt.
func TestOnlyTestBuildsUseFailpoints(t *testing.T) {
	exempt := map[string]bool{filepath.Join("internal", "failpoint"): true, filepath.Join("internal", "chaos"): true, "test": true,
		filepath.Join("cmd", "meshctl", "verify.go"): true}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if exempt[rel] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "build") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		if !strings.Contains(src, `"github.com/meshloc/meshloc/internal/failpoint"`) {
			return nil
		}
		if !strings.HasPrefix(src, "//go:build failpoints\n") {
			t.Errorf("%s uses internal/failpoint in a production build: put the fault in a seam wrapper built only with -tags failpoints", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
