package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoBinaries: Bin found no directory holding PostgreSQL's initdb.
var ErrNoBinaries = errors.New("pgserver: no PostgreSQL binaries found (apt-get install postgresql, or set MESHLOC_PG_BIN to the directory holding initdb and postgres)")

// Bin is the directory of PostgreSQL's server binaries: $MESHLOC_PG_BIN if
// set (trusted as given, so that a wrong setting fails loudly instead of
// falling back), else `pg_config --bindir` when initdb is there (a
// libpq-dev alone installs pg_config without the server), else the newest
// /usr/lib/postgresql/*/bin holding initdb (Debian's layout, not on PATH);
// "" if none.
func Bin() string {
	if d := os.Getenv("MESHLOC_PG_BIN"); d != "" {
		return d
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if isFile(filepath.Join(d, "initdb")) {
			return d
		}
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	var dirs []string
	for _, f := range found {
		dirs = append(dirs, filepath.Dir(f))
	}
	return newest(dirs)
}

// newest is the directory of dirs (…/<version>/bin) with the highest
// version, compared numerically: 10 is newer than 9.6.
func newest(dirs []string) string {
	best, bestV := "", []int(nil)
	for _, d := range dirs {
		v := version(filepath.Base(filepath.Dir(d)))
		if best == "" || less(bestV, v) {
			best, bestV = d, v
		}
	}
	return best
}

func version(s string) []int {
	var v []int
	for _, part := range strings.Split(s, ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			n = -1 // not a version: older than any
		}
		v = append(v, n)
	}
	return v
}

func less(a, b []int) bool {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// runAs is the credential initdb and postgres run with: nil (this process's
// user) unless this process is root, which PostgreSQL refuses to run as;
// then nobody:nogroup (nobody's own group where there is no nogroup).
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root, and PostgreSQL refuses root: %w", err)
	}
	gid := u.Gid
	if g, err := user.LookupGroup("nogroup"); err == nil {
		gid = g.Gid
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	g, err2 := strconv.ParseUint(gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgserver: user nobody: %w", err)
	}
	// Groups is empty on purpose: setgroups drops root's supplementary groups.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(g)}, nil
}

// prepare makes dir the server's own: chowned to cred's user, mode 0700
// (initdb requires a data directory only its owner can enter), and checks
// that the user can reach it through every directory above it.
func prepare(dir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		if !searchable(st, cred) {
			return fmt.Errorf("pgserver: %s is not searchable by uid %d, which the server runs as (PostgreSQL refuses root): put the directory elsewhere (e.g. under /tmp)", d, cred.Uid)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func searchable(st os.FileInfo, cred *syscall.Credential) bool {
	m := st.Mode().Perm()
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return true // cannot tell: let initdb say
	case sys.Uid == cred.Uid:
		return m&0o100 != 0
	case sys.Gid == cred.Gid:
		return m&0o010 != 0
	default:
		return m&0o001 != 0
	}
}
