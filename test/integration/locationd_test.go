// Package integration runs meshloc's binaries as real processes against real
// etcd (see docs/verification.md, "The pieces" and "Faults").
package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
)

// TestLocationdProcess: locationd as a process with its embedded etcd; an
// owner and an object written through pkg/lease and pkg/authority are seen in
// its API and, as readable JSON, by etcdctl; SIGTERM stops it with status 0.
func TestLocationdProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	root := moduleRoot(t)
	p, clientURL, cl := startLocationd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// An owner and one object, through the packages the nodes use.
	etcd := etcdtest.Client(t, clientURL)
	keys := keyspace.Default()
	k, err := lease.Start(ctx, etcd, keys, lease.Config{
		OwnerID: "n1",
		TTL:     5 * time.Second,
		Descriptor: lease.Descriptor{
			RoutingID: strings.Repeat("0f", 16), Address: "127.0.0.1:7100", State: lease.StateServing,
			Weight: 1, ApplicationVersion: "v1", Types: []string{"counter"}, StartedUnixMs: time.Now().UnixMilli(),
		},
	})
	if err != nil {
		t.Fatalf("lease.Start: %v", err)
	}
	defer func() { _ = k.Close(context.Background()) }()
	obj := keyspace.Actor("counter", "c1")
	res, err := authority.New(etcd, keys).Activate(ctx, authority.ActivateRequest{
		Object: obj,
		Owner:  authority.OwnerRef{ID: "n1", Generation: k.Generation()},
		Node:   authority.NodeRef{RoutingID: strings.Repeat("0f", 16), Address: "127.0.0.1:7100"},
	})
	if err != nil || !res.Won {
		t.Fatalf("activate: won=%v err=%v", res.Won, err)
	}

	owners, raw, err := cl.Owners(ctx)
	if err != nil || len(owners.Owners) != 1 || owners.Owners[0].ID != "n1" || owners.Owners[0].Generation != k.Generation() {
		t.Fatalf("/v1/owners: %s %v", raw, err)
	}
	got, raw, err := cl.Object(ctx, obj.String())
	if err != nil || !got.OwnerAlive || got.Record.Owner.Generation != k.Generation() || got.Record.ObjectGeneration != 1 ||
		got.StoreVersion != res.Snapshot.StoreVersion {
		t.Fatalf("/v1/objects/%s: %s %v", obj, raw, err)
	}

	// etcdctl sees readable JSON values (docs/design.md §2).
	ectx, ecancel := context.WithTimeout(ctx, 5*time.Minute) // the first `go tool` run compiles etcdctl
	defer ecancel()
	ec := exec.CommandContext(ectx, "go", "tool", "etcdctl", "--endpoints", clientURL, "get", "--prefix", "/meshloc/")
	ec.Dir = root
	out, err := ec.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool etcdctl: %v\n%s", err, out)
	}
	for _, want := range []string{
		"/meshloc/default/owners/n1\n",
		`"ownerId":"n1"`,
		"/meshloc/default/authority/actor/counter/c1\n",
		`"objectGeneration":1`,
		fmt.Sprintf(`"owner":{"id":"n1","generation":%d}`, k.Generation()),
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("etcdctl output lacks %q:\n%s", want, out)
		}
	}

	if err := k.Close(ctx); err != nil {
		t.Fatalf("keeper close: %v", err)
	}
	etcd.Close()

	// SIGTERM: a clean shutdown, status 0, within a bound.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.wait(20 * time.Second) {
		t.Fatal("locationd still running 20s after SIGTERM")
	}
	if p.err != nil {
		t.Fatalf("locationd exited with %v after SIGTERM", p.err)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(cl.Base(), "http://"), time.Second); err == nil {
		c.Close()
		t.Fatal("the API port still accepts connections after exit")
	}
	if !strings.Contains(p.out.String(), `"message":"locationd stopped"`) {
		t.Errorf("no clean-stop log line:\n%s", p.out)
	}
}
