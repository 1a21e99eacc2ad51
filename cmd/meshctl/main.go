// Command meshctl inspects and (later) operates a meshloc cluster through
// locationd's API, in the manner of etcdctl: `meshctl owners`, `meshctl
// objects --orphaned`, `meshctl get actor/counter/c1`, with -o table|json;
// and calls objects through a meshnode gateway: `meshctl call actor/counter/c1
// add 2` (or, with --etcd-endpoints, straight to the owner).
//
// Exit status: 0 on success, 1 on an error, 2 on a usage error. An error is
// one line on stderr: "meshctl: <code>: <message>", where <code> is the API's
// (not_found, invalid_argument, unavailable, internal), a call's code
// (wire.CodeName: state_lost, unknown_method, deadline_exceeded, ...), or
// "usage". Object names, owner ids, --node and --locationd are checked
// before any request: one that does not parse is a usage error (exit status
// 2) with the code invalid_argument, and nothing is sent (args.go).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshloc/meshloc/internal/bench"
)

func main() {
	bench.MaybeChild() // a process the bench started again as its child
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}
