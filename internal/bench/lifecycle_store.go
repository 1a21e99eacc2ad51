package bench

import (
	"context"
	"fmt"

	"github.com/meshloc/meshloc/internal/bench/durablebench"
)

// lifecycleStore prepares the lifecycle section's state store: nothing for
// etcd's; for "postgres", a server (durablebench.Launch) that every node
// of the section names (lifeArgs). stop ends it.
func (x *run) lifecycleStore(ctx context.Context, store string) (stop func(), err error) {
	switch store {
	case "", "etcd":
		return func() {}, nil
	case "postgres":
	default:
		return nil, fmt.Errorf("bench: lifecycle: state store %q: want etcd or postgres", store)
	}
	srv, end, err := durablebench.Launch(ctx, "lifecycle", x.step)
	if err != nil {
		return nil, err
	}
	x.lifeStore = []string{"--state-store", srv.DSN()}
	return func() { x.lifeStore = nil; end() }, nil
}

// lifeArgs are a lifecycle node's flags: args and its state store's.
func (x *run) lifeArgs(args ...string) []string { return append(args, x.lifeStore...) }
