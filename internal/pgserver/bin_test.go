package pgserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBinPrefersTheEnvironment(t *testing.T) {
	t.Setenv("MESHLOC_PG_BIN", "/opt/pg/bin")
	if got := Bin(); got != "/opt/pg/bin" {
		t.Fatalf("Bin() = %q, want $MESHLOC_PG_BIN", got)
	}
}

func TestNewestComparesVersionsAsNumbers(t *testing.T) {
	dirs := []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/10/bin", "/usr/lib/postgresql/x/bin"}
	if got := newest(dirs); got != "/usr/lib/postgresql/15/bin" {
		t.Fatalf("newest = %q, want the 15 one", got)
	}
	if got := newest(nil); got != "" {
		t.Fatalf("newest(nil) = %q, want \"\"", got)
	}
}

func TestLaunchWithoutBinaries(t *testing.T) {
	t.Setenv("MESHLOC_PG_BIN", t.TempDir()) // a directory without initdb
	_, err := Launch(context.Background(), filepath.Join(t.TempDir(), "pg"))
	if err == nil || !strings.Contains(err.Error(), "initdb") {
		t.Fatalf("Launch with no initdb: err = %v, want one naming initdb", err)
	}
}

func TestLogTail(t *testing.T) {
	s := &Server{dir: t.TempDir()}
	if err := os.WriteFile(s.LogPath(), []byte("1\n2\n3\n4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := s.LogTail(2); got != "3\n4" {
		t.Fatalf("LogTail(2) = %q, want \"3\\n4\"", got)
	}
}

// As root the server runs as nobody, which must reach its directory:
// Launch says which directory above it is in the way.
func TestLaunchNamesAnUnreachableParent(t *testing.T) {
	if os.Geteuid() != 0 || Bin() == "" {
		t.Skip("needs root and PostgreSQL's binaries")
	}
	parent := t.TempDir() // 0700, root's
	if err := os.Chmod(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Launch(context.Background(), filepath.Join(parent, "pg"))
	if err == nil || !strings.Contains(err.Error(), parent+" is not searchable") {
		t.Fatalf("err = %v, want one naming %s", err, parent)
	}
}
