package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/meshloc/meshloc/internal/freeport"
)

const (
	// User is the superuser initdb creates; Database is the database DSN
	// names, created by Launch.
	User     = "meshloc"
	Database = "meshloc"

	readyTimeout = 30 * time.Second // initdb is done: a healthy server is up in well under a second
	stopGrace    = 10 * time.Second // an immediate shutdown takes milliseconds
	logTailLines = 50
)

// Server is a running PostgreSQL server in a directory of its own on a free
// loopback port.
type Server struct {
	bin, dir string
	port     int
	cred     *syscall.Credential
	args     []string // postgres' arguments
	dbs      atomic.Int64

	mu sync.Mutex
	p  *proc // nil once stopped or killed
}

// Launch creates a cluster in dir (created if missing; it must hold no
// cluster yet), starts its server and creates the database DSN names.
// settings are extra `name=value` server settings, applied after the
// defaults (e.g. "synchronous_commit=on" for a test that kills the server
// and counts on acknowledged commits). The server runs until Stop or Kill;
// removing dir afterwards is the caller's.
func Launch(ctx context.Context, dir string, settings ...string) (*Server, error) {
	bin := Bin()
	if bin == "" {
		return nil, ErrNoBinaries
	}
	if !isFile(filepath.Join(bin, "initdb")) {
		return nil, fmt.Errorf("pgserver: no initdb in %s (is MESHLOC_PG_BIN right?)", bin)
	}
	if dir == "" {
		return nil, errors.New("pgserver: Launch needs a directory")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	if err := prepare(dir, cred); err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, cred: cred}
	if err := run(ctx, bin, "initdb", []string{"-D", s.dataDir(), "--auth=trust", "-U", User,
		"--encoding=UTF8", "--locale=C", "--no-sync"}, cred, dir, s.LogPath()); err != nil {
		return nil, s.withLog(err)
	}
	// A free port can be taken by another process before the server binds
	// it: pick another and try again.
	for attempt := 1; ; attempt++ {
		if s.port, err = freeport.Get(); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		s.args = serverArgs(s.dataDir(), s.port, filepath.Join(dir, "s"), settings)
		off := s.logSize()
		if s.p, err = s.start(ctx); err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(s.logSince(off), "could not bind") {
			return nil, err
		}
	}
	if err := s.exec(ctx, "postgres", "CREATE DATABASE "+Database); err != nil {
		s.Stop()
		return nil, s.withLog(err)
	}
	return s, nil
}

// serverArgs are postgres' arguments. The settings make a fast server for
// tests only: without fsync and full-page writes a crash of the machine
// (not of the server) can corrupt the cluster, and without synchronous
// commit a crash of the server can lose the last acknowledged commits.
func serverArgs(data string, port int, sock string, settings []string) []string {
	if len(sock)+len("/.s.PGSQL.65535") >= 100 {
		sock = "" // a Unix socket path is limited to ~100 bytes: TCP only
	}
	args := []string{"-D", data, "-p", fmt.Sprint(port), "-k", sock,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200"}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	return args
}

// start starts the postmaster and waits until it accepts connections.
func (s *Server) start(ctx context.Context) (*proc, error) {
	sock := filepath.Join(s.dir, "s")
	if err := os.MkdirAll(sock, 0o700); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(sock, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
	}
	p, err := startProc(s.bin, "postgres", s.args, s.cred, s.dir, s.LogPath())
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, p); err != nil {
		p.stop(stopGrace)
		return nil, s.withLog(err)
	}
	return p, nil
}

// waitReady polls with a real connection and query until the server
// answers, it exits, or readyTimeout passes.
func (s *Server) waitReady(ctx context.Context, p *proc) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	backoff := 20 * time.Millisecond
	for {
		err := s.exec(ctx, "postgres", "SELECT 1")
		if err == nil {
			return nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-p.done:
			t.Stop()
			return fmt.Errorf("pgserver: postgres exited before accepting connections: %v", p.err)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgserver: postgres on port %d did not accept connections: %w (last attempt: %v)", s.port, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// exec runs one statement in database db on a connection of its own.
func (s *Server) exec(ctx context.Context, db, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSNFor(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// DSN is the connection string of the database Launch created.
func (s *Server) DSN() string { return s.DSNFor(Database) }

// DSNFor is the connection string of database db as the superuser.
func (s *Server) DSNFor(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", User, s.port, db)
}

// CreateDatabase creates another empty database and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("%s_%d", Database, s.dbs.Add(1))
	if err := s.exec(ctx, "postgres", "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgserver: create database %s: %w", name, err)
	}
	return s.DSNFor(name), nil
}

// Port is the loopback TCP port the server listens on.
func (s *Server) Port() int { return s.port }

// Dir is the server's directory: the cluster (data/), the log, the socket.
func (s *Server) Dir() string { return s.dir }

// LogPath is the file the server's (and initdb's) output goes to.
func (s *Server) LogPath() string { return filepath.Join(s.dir, "postgres.log") }

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// Stop shuts the server down (an immediate shutdown: nothing to keep) and
// waits for it. It does nothing if the server is not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		s.p.stop(stopGrace)
		s.p = nil
	}
}

// Kill sends SIGKILL to the postmaster, as a crash would, and waits for
// it; its backends see it die and exit by themselves. Restart recovers the
// cluster. The server's default synchronous_commit=off lets a crash lose
// the last acknowledged commits: a test that counts on them launches with
// "synchronous_commit=on".
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		s.p.kill()
		s.p = nil
	}
}

// Restart starts the stopped or killed server again, on the same port and
// cluster (after Kill, PostgreSQL replays its WAL first).
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		return errors.New("pgserver: Restart: the server is running")
	}
	// After Kill the postmaster's children exit by themselves, a moment
	// later; until the last one has, the new server refuses the cluster's
	// shared memory as still in use.
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		off := s.logSize()
		p, err := s.start(ctx)
		if err == nil {
			s.p = p
			return nil
		}
		if attempt == 10 || !strings.Contains(s.logSince(off), "is still in use") {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}
