// Package pgserver runs a throwaway PostgreSQL server from the machine's
// binaries (initdb, postgres): one cluster in a directory the caller gives,
// listening on a free loopback port, with the superuser meshloc and trust
// authentication, tuned for speed (fsync, synchronous_commit and
// full_page_writes off). It is what tests (through internal/pgtest) and
// benchmark commands use to get a real server; it is not a way to run
// PostgreSQL in production, and it never touches a cluster the system
// manages.
//
// It imports no testing package, so that a binary can use it.
//
// PostgreSQL refuses to run as root. When this process is root, initdb and
// the server run as the user nobody (group nogroup), the directory is
// chowned to it, and every directory above it must be searchable by it
// (Launch checks and says which one is not). Otherwise they run as the
// current user.
//
// Invariants: every server process Launch or Restart starts has one
// goroutine that waits for it, and Stop or Kill returns only after that
// goroutine has ended. The postmaster gets SIGQUIT (an immediate shutdown)
// if the thread that started it exits, so a test binary that dies without
// its cleanups (a timeout, a panic) leaves no server behind.
package pgserver
