// Package integration runs meshloc's binaries as real processes against real
// etcd (see ../../../shared/TESTING.md, "Workloads" and "Faults").
package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/locationd/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// moduleRoot is the directory of the go.mod this test belongs to.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("not inside a Go module")
	}
	return filepath.Dir(gomod)
}

// build compiles ./cmd/<name> of the module into dir.
func build(t *testing.T, root, dir, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	return bin
}

// syncBuffer collects a process's output for the failure message.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// process is a started binary; wait returns its exit error once.
type process struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

func startProcess(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", filepath.Base(bin), p.out)
		}
	})
	return p
}

func freeAddr(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t)) }

// TestLocationdProcess: locationd as a process with its embedded etcd; an
// owner and an object written through pkg/lease and pkg/authority are seen in
// its API and, as readable JSON, by etcdctl; SIGTERM stops it with status 0.
func TestLocationdProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	root := moduleRoot(t)
	bin := build(t, root, t.TempDir(), "locationd")

	clientURL := "http://" + freeAddr(t)
	httpAddr := freeAddr(t)
	p := startProcess(t, bin,
		"--data-dir", filepath.Join(t.TempDir(), "locationd"),
		"--listen-client", clientURL,
		"--listen-peer", "http://"+freeAddr(t),
		"--http", httpAddr,
	)

	// Wait for /readyz.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := api.NewClient("http://"+httpAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		err := cl.Ready(rctx)
		rcancel()
		if err == nil {
			break
		}
		select {
		case perr := <-p.done:
			p.done <- perr
			t.Fatalf("locationd exited before ready: %v", perr)
		case <-ctx.Done():
			t.Fatalf("locationd not ready: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}

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

	// etcdctl sees readable JSON values (DESIGN.md §2).
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
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("locationd exited with %v after SIGTERM", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("locationd still running 20s after SIGTERM")
	}
	if c, err := net.DialTimeout("tcp", httpAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("the API port still accepts connections after exit")
	}
	if !strings.Contains(p.out.String(), `"message":"locationd stopped"`) {
		t.Errorf("no clean-stop log line:\n%s", p.out)
	}
}
