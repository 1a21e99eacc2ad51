package pgtest

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestStartServesQueries(t *testing.T) {
	s := Start(t)
	conn := connect(t, s.DSN())
	mustExec(t, conn, "CREATE TABLE kv (k text PRIMARY KEY, v bigint NOT NULL)")
	mustExec(t, conn, "INSERT INTO kv VALUES ($1, $2), ($3, $4)", "a", 1, "b", 2)
	var sum int64
	if err := conn.QueryRow(t.Context(), "SELECT sum(v) FROM kv").Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != 3 {
		t.Fatalf("sum = %d, want 3", sum)
	}
	var db, user string
	if err := conn.QueryRow(t.Context(), "SELECT current_database(), current_user").Scan(&db, &user); err != nil {
		t.Fatal(err)
	}
	if db != "meshloc" || user != "meshloc" {
		t.Fatalf("connected to %s as %s, want meshloc as meshloc", db, user)
	}
}

// The server never runs as root: its cluster belongs to whoever it runs as.
func TestRunsUnprivileged(t *testing.T) {
	s := Start(t)
	st, err := os.Stat(s.Dir() + "/data")
	if err != nil {
		t.Fatal(err)
	}
	owner := st.Sys().(*syscall.Stat_t).Uid
	if os.Geteuid() == 0 && owner == 0 {
		t.Fatal("the cluster belongs to root: the server would have refused to run")
	}
	if os.Geteuid() != 0 && owner != uint32(os.Geteuid()) {
		t.Fatalf("the cluster belongs to uid %d, not to this user (%d)", owner, os.Geteuid())
	}
}

func TestTwoServersAtOnce(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Port() == b.Port() {
		t.Fatalf("both servers on port %d", a.Port())
	}
	ca, cb := connect(t, a.DSN()), connect(t, b.DSN())
	mustExec(t, ca, "CREATE TABLE only_a (x int)")
	if _, err := cb.Exec(t.Context(), "SELECT * FROM only_a"); !isUndefinedTable(err) {
		t.Fatalf("a's table on b: err = %v, want undefined_table", err)
	}
}

func TestStopIsIdempotent(t *testing.T) {
	s := Start(t)
	s.Stop()
	s.Stop() // and the cleanup stops it a third time
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, s.DSN()); err == nil {
		conn.Close(ctx)
		t.Fatal("connected to a stopped server")
	}
}

func TestNewDatabaseIsIsolated(t *testing.T) {
	s := Start(t)
	d1, d2 := s.NewDatabase(t), s.NewDatabase(t)
	if d1 == d2 || d1 == s.DSN() {
		t.Fatalf("DSNs not distinct: %s, %s, %s", s.DSN(), d1, d2)
	}
	c1 := connect(t, d1)
	mustExec(t, c1, "CREATE TABLE t (x int)")
	mustExec(t, c1, "INSERT INTO t VALUES (1)")
	for _, dsn := range []string{d2, s.DSN()} {
		if _, err := connect(t, dsn).Exec(t.Context(), "SELECT * FROM t"); !isUndefinedTable(err) {
			t.Fatalf("the table of %s seen from %s: err = %v, want undefined_table", d1, dsn, err)
		}
	}
}

// A killed server recovers its cluster on Restart: with synchronous commit
// on, every acknowledged commit survives.
func TestKillThenRestartRecovers(t *testing.T) {
	s := Start(t, "synchronous_commit=on")
	conn, err := pgx.Connect(t.Context(), s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, "CREATE TABLE t (x int)")
	mustExec(t, conn, "INSERT INTO t SELECT generate_series(1, 1000)")
	s.Kill()
	conn.Close(context.Background())
	if err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := connect(t, s.DSN()).QueryRow(t.Context(), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1000 {
		t.Fatalf("%d rows after the crash, want 1000", n)
	}
	if !strings.Contains(s.LogTail(50), "not properly shut down") {
		t.Errorf("no crash recovery in the log:\n%s", s.LogTail(50))
	}
}

// fakeTB records how a test was ended, instead of ending it.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Skip(args ...any)  { f.skipped = args[0].(string) }
func (f *fakeTB) Fatal(args ...any) { f.fatal = args[0].(string) }

func TestMissingBinariesSkipOutsideCI(t *testing.T) {
	f := &fakeTB{TB: t}
	missing(f, false)
	if f.fatal != "" || !strings.Contains(f.skipped, "apt-get install postgresql") {
		t.Errorf("outside CI: skipped %q, fatal %q; want a skip saying how to install", f.skipped, f.fatal)
	}
	f = &fakeTB{TB: t}
	missing(f, true)
	if f.skipped != "" || !strings.Contains(f.fatal, "apt-get install postgresql") {
		t.Errorf("under CI: skipped %q, fatal %q; want a failure", f.skipped, f.fatal)
	}
}

func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
