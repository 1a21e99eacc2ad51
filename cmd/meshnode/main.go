// Command meshnode hosts objects and routes calls to their owners: the
// built-in object types (pkg/actor/builtin) run by pkg/meshnode's Main,
// the one call a program of its own makes too. SIGTERM or SIGINT drains
// it (every hosted object is moved to another node), then stops it (its
// lease revoked last); a second SIGTERM or SIGINT skips the rest of the
// drain and stops at once. A drain asked through AdminService (meshctl
// drain) stops it too. Exit status 0 after a drain, even if some objects
// could not be moved (the log lists them); 2 for a command line that
// cannot run; 1 otherwise. SIGHUP reloads its TLS certificate.
package main

import (
	"io"
	"os"

	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/meshnode"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	return meshnode.Run(args, stdout, stderr, lookup, meshnode.Register(builtin.Register))
}
