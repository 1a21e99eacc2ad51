// Package pgtest gives a test a real PostgreSQL server of its own
// (internal/pgserver) and ties it to the test's life: the server stops and
// its directory is removed when the test ends, and the server's log is
// printed if the test failed. Tests of PostgreSQL-backed code run against
// it, never against a mock.
//
// Without PostgreSQL's binaries a test is skipped, with how to install
// them; under CI=true it fails instead (.ci/run installs them). This
// package imports testing; a binary that needs a server uses
// pgserver.Launch directly.
package pgtest

import (
	"os"
	"testing"

	"github.com/meshloc/meshloc/internal/pgserver"
)

// Server is a running PostgreSQL server in a temporary directory on a free
// loopback port (pgserver.Server: DSN, Stop, Kill, Restart, LogTail, …).
type Server struct {
	*pgserver.Server
}

// Start starts a server for t and returns it; t's cleanup stops it,
// prints its log's tail if t failed, and removes its directory. settings
// are extra server settings (`name=value`, see pgserver.Launch).
func Start(t testing.TB, settings ...string) *Server {
	t.Helper()
	Require(t)
	// Not t.TempDir: when root, the server runs as nobody, which cannot
	// enter the 0700 directory t.TempDir's live in; and a short path keeps
	// the server's Unix socket path under its length limit.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // registered first, so it runs after the Stop below
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	srv, err := pgserver.Launch(t.Context(), dir, settings...)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() {
			t.Logf("pgtest: the last 50 lines of %s:\n%s", srv.LogPath(), srv.LogTail(50))
		}
	})
	return &Server{srv}
}

// NewDatabase creates another empty database on the server and returns its
// DSN: tests sharing a server each get their own.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	dsn, err := s.CreateDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// Require skips t (fails it under CI=true) when PostgreSQL's binaries are
// missing: for a test that starts its server some other way (a process
// cluster's).
func Require(t testing.TB) {
	t.Helper()
	if pgserver.Bin() == "" {
		missing(t, os.Getenv("CI") == "true")
	}
}

// missing ends a test that has no PostgreSQL: skipped, unless in CI.
func missing(t testing.TB, ci bool) {
	t.Helper()
	const how = "no PostgreSQL binaries (initdb, postgres) found: install them with `apt-get install postgresql` (or set MESHLOC_PG_BIN to their directory)"
	if ci {
		t.Fatal("pgtest: " + how + "; .ci/run installs them")
	} else {
		t.Skip("pgtest: " + how)
	}
}
