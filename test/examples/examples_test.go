package examples

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

var root = filepath.Join("..", "..")

// Every example is a module of its own that builds and vets with nothing
// but the public packages: no file under examples/ imports internal/.
func TestExamplesBuildAlone(t *testing.T) {
	for _, ex := range []string{"cart", "inventory"} {
		dir := filepath.Join(root, "examples", ex)
		for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
			cmd := exec.Command("go", args...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("examples/%s: go %v: %v\n%s", ex, args, err, out)
			}
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "examples"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "meshloc/internal/") {
			t.Errorf("%s imports internal/", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// process is one started binary, killed at the end of the test.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's, once done is closed
}

func start(t *testing.T, dir, name, bin string, args ...string) *process {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); log.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
			t.Logf("--- %s log (last 3000 bytes):\n%s", name, tail(b, 3000))
		}
	})
	return p
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func build(t *testing.T, dir, out string, pkgs ...string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"build", "-o", out + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v in %s: %v\n%s", pkgs, dir, err, b)
	}
}

func addr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The cart example as its users run it: locationd with its embedded etcd,
// two cart nodes (the example's own main on pkg/node) and one stock
// meshnode, which hosts no cart but routes calls for them. Writers add
// unique items to carts through every gateway while the carts relocate
// (client.Relocate, followed with Wait), and one cart node is drained away
// mid-run. Every acknowledged add is in its cart exactly once, nothing
// that was never sent is: the same check the built-in types get.
func TestCartCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	build(t, root, bin, "./cmd/locationd", "./cmd/meshnode")
	build(t, filepath.Join(root, "examples", "cart"), bin, "./cmd/cartnode", "./cmd/cartclient")

	etcdClient, httpAddr := "http://"+addr(t), addr(t)
	start(t, work, "locationd", filepath.Join(bin, "locationd"), "--data-dir", filepath.Join(work, "etcd"),
		"--listen-client", etcdClient, "--listen-peer", "http://"+addr(t), "--http", httpAddr)
	ld := "http://" + httpAddr
	waitReady(t, ld)

	type nodeSpec struct{ name, bin, listen string }
	nodes := []nodeSpec{{"cart1", "cartnode", addr(t)}, {"cart2", "cartnode", addr(t)}, {"gw", "meshnode", addr(t)}}
	procs := map[string]*process{}
	for _, n := range nodes {
		args := []string{"--name", n.name, "--etcd-endpoints", etcdClient, "--listen", n.listen, "--http", "", "--lease-ttl", "3s"}
		if n.bin == "cartnode" {
			args = append(args, "--cart-ttl", "10m")
		}
		procs[n.name] = start(t, work, n.name, filepath.Join(bin, n.bin), args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := client.New(ctx, client.Config{EtcdEndpoints: []string{etcdClient}, Locationd: ld})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	waitOwners(ctx, t, admin, 3)

	// The client program of the example runs against the cluster.
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "cartclient"), "--locationd", ld, "--etcd", etcdClient, "--cart", "actor/cart/demo").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "completed") {
		t.Fatalf("cartclient: %v\n%s", err, out)
	}

	const carts = 40 // at most 1000 items each
	var (
		mu      sync.Mutex
		acked   = map[string]string{} // item → cart
		unknown = map[string]string{} // sent, outcome unknown
		refused = map[string]string{} // answered: not executed
		errs    = map[string]int{}    // per gateway and error, for the log
		ops     atomic.Int64
	)
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for gi, n := range nodes {
		c, err := client.New(ctx, client.Config{Nodes: []string{n.listen}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for w := range 2 {
			wg.Go(func() {
				for i := 0; wctx.Err() == nil; i++ {
					cart := fmt.Sprintf("actor/cart/c%d", rand.IntN(carts))
					item := fmt.Sprintf("g%d-w%d-i%d", gi, w, i)
					_, err := c.Call(wctx, cart, "add", item, "1")
					mu.Lock()
					var we *wire.Error
					switch {
					case err == nil:
						acked[item] = cart
						ops.Add(1)
					case errors.As(err, &we) && we.Code == pb.Code_CODE_APPLICATION_ERROR:
						refused[item] = cart // answered: not executed
						errs[fmt.Sprintf("%s: %.80v", nodes[gi].name, err)]++
					default:
						unknown[item] = cart
						errs[fmt.Sprintf("%s: %.80v", nodes[gi].name, err)]++
					}
					mu.Unlock()
					if err != nil && gi == 0 && procs["cart1"].exited() {
						return // its gateway is gone (drained)
					}
				}
			})
		}
	}
	// Relocations while called, each followed to its outcome (foreground:
	// what is checked is that they lose nothing, not their pace).
	var moved, notMoved atomic.Int64
	wg.Go(func() {
		for wctx.Err() == nil {
			cart := fmt.Sprintf("actor/cart/c%d", rand.IntN(carts))
			id, err := admin.Relocate(wctx, cart, client.RelocateOptions{Foreground: true})
			if err != nil {
				notMoved.Add(1)
				continue
			}
			if r, err := admin.Wait(wctx, id); err == nil && r.Outcome == api.OutcomeCompleted {
				moved.Add(1)
			} else {
				notMoved.Add(1)
			}
		}
	})
	time.Sleep(4 * time.Second)
	// Drain cart1: its carts move to cart2 (the stock meshnode hosts no
	// cart), then it stops.
	rep, err := admin.Drain(ctx, "cart1", api.DrainRequest{}, nil)
	if err != nil {
		t.Fatalf("drain cart1: %v", err)
	}
	if rep.FailedCount != 0 {
		t.Errorf("drain cart1: failed %+v", rep.Failed)
	}
	// cartnode is meshnode.Main, the documented embedding: drained
	// through meshctl's API it stops, with exit status 0, as meshnode.
	select {
	case <-procs["cart1"].done:
		if err := procs["cart1"].err; err != nil {
			t.Fatalf("cart1 exited with %v after its drain, want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cart1 did not stop after its drain")
	}
	time.Sleep(3 * time.Second)
	stopWriters()
	wg.Wait()
	for e, n := range errs {
		t.Logf("%6d × %s", n, e)
	}
	t.Logf("%d adds acknowledged, %d of unknown outcome; %d relocations completed, %d not; drain moved %d", ops.Load(), len(unknown), moved.Load(), notMoved.Load(), rep.MovedCount)
	if ops.Load() < 100 || moved.Load() < 3 {
		t.Fatalf("too little happened: %d adds, %d relocations", ops.Load(), moved.Load())
	}

	// Every cart now, read through the stock gateway.
	gw, err := client.New(ctx, client.Config{Nodes: []string{nodes[2].listen}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	have := map[string]string{}
	for i := range carts {
		name := fmt.Sprintf("actor/cart/c%d", i)
		r, err := gw.Call(ctx, name, "items")
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		var v struct {
			Items map[string]int `json:"items"`
		}
		if err := json.Unmarshal(r.Payload, &v); err != nil {
			t.Fatal(err)
		}
		for item, n := range v.Items {
			if n != 1 {
				t.Errorf("%s: %s added %d times (executed twice?)", name, item, n)
			}
			have[item] = name
		}
		if o, err := admin.Get(ctx, name); err != nil || o.Record.Owner.ID != "cart2" {
			t.Errorf("%s owned by %v (%v), want cart2 after the drain", name, o.Record.Owner, err)
		}
	}
	for item, cart := range acked {
		if have[item] != cart {
			t.Errorf("acknowledged %s in %s is lost (found in %q)", item, cart, have[item])
		}
	}
	for item, cart := range have {
		switch {
		case refused[item] != "":
			t.Errorf("%s in %s was refused (not executed), yet it is there", item, cart)
		case acked[item] == "" && unknown[item] != cart:
			t.Errorf("%s in %s was never sent there", item, cart)
		}
	}
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := http.Get(base + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("locationd at %s not ready", base)
}

func waitOwners(ctx context.Context, t *testing.T, c *client.Client, n int) {
	t.Helper()
	for {
		os, err := c.Owners(ctx)
		serving := 0
		for _, o := range os {
			if o.State == "serving" {
				serving++
			}
		}
		if err == nil && serving >= n {
			return
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("%d owners serving (%v), want %d", serving, err, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The cart reserves stock in the inventory by message (issue 20): a cart
// node, two inventory nodes and a stock meshnode (a gateway for both
// types). A cart asks its warehouse to reserve each of its items; the
// warehouse's node is killed -9 right after, so the messages wait for the
// warehouse to come back on the other inventory node (durable: from etcd).
// Every item is reserved exactly once or refused with the warehouse's
// reason, each answer reaches the cart once, and reserving again asks only
// for what was refused.
func TestCartReservesStockByMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	build(t, root, bin, "./cmd/locationd", "./cmd/meshnode")
	build(t, filepath.Join(root, "examples", "cart"), bin, "./cmd/cartnode")
	build(t, filepath.Join(root, "examples", "inventory"), bin, "./cmd/inventorynode")

	etcdClient, httpAddr := "http://"+addr(t), addr(t)
	start(t, work, "locationd", filepath.Join(bin, "locationd"), "--data-dir", filepath.Join(work, "etcd"),
		"--listen-client", etcdClient, "--listen-peer", "http://"+addr(t), "--http", httpAddr)
	ld := "http://" + httpAddr
	waitReady(t, ld)
	gwAddr := addr(t)
	procs := map[string]*process{}
	for _, n := range []struct{ name, bin, listen string }{
		{"cart1", "cartnode", addr(t)}, {"inv1", "inventorynode", addr(t)}, {"inv2", "inventorynode", addr(t)}, {"gw", "meshnode", gwAddr},
	} {
		args := []string{"--name", n.name, "--etcd-endpoints", etcdClient, "--listen", n.listen, "--http", "", "--lease-ttl", "3s"}
		if n.name == "gw" {
			args = append(args, "--weight", "0")
		}
		procs[n.name] = start(t, work, n.name, filepath.Join(bin, n.bin), args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := client.New(ctx, client.Config{EtcdEndpoints: []string{etcdClient}, Locationd: ld})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	waitOwners(ctx, t, admin, 4)
	c, err := client.New(ctx, client.Config{Nodes: []string{gwAddr}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(obj, method string, args ...string) []byte {
		t.Helper()
		r, err := c.Call(ctx, obj, method, args...)
		if err != nil {
			t.Fatalf("%s %s %v: %v", obj, method, args, err)
		}
		return r.Payload
	}
	const w1, alice = "actor/inventory/w1", "actor/cart/alice"
	// The gateway routes a type once its directory lists a node hosting it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := c.Call(ctx, w1, "level", "apple")
		_, err2 := c.Call(ctx, alice, "items")
		if err == nil && err2 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not route inventories and carts: %v, %v", err, err2)
		}
		time.Sleep(100 * time.Millisecond)
	}
	call(w1, "stock", "apple", "5")
	call(w1, "stock", "bread", "1")
	call(alice, "add", "apple", "2")
	call(alice, "add", "bread", "3")
	call(alice, "add", "coffee", "1")
	owner, err := admin.Get(ctx, w1)
	if err != nil {
		t.Fatal(err)
	}
	call(alice, "reserve", w1)
	// The warehouse's node dies now, messages in flight or not.
	victim := procs[owner.Record.Owner.ID]
	_ = victim.cmd.Process.Kill()
	<-victim.done

	type cartView struct {
		Reservations map[string]string `json:"reservations"`
	}
	var v cartView
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := json.Unmarshal(call(alice, "items"), &v); err != nil {
			t.Fatal(err)
		}
		pending := 0
		for _, s := range v.Reservations {
			if s == "pending" {
				pending++
			}
		}
		if pending == 0 && len(v.Reservations) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reservations still pending after the warehouse's node was killed: %v", v.Reservations)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v.Reservations["apple"] != "reserved" || !strings.Contains(v.Reservations["bread"], "application_error") || !strings.Contains(v.Reservations["coffee"], "application_error") {
		t.Fatalf("reservations %v: want apple reserved, bread and coffee refused", v.Reservations)
	}
	level := func(sku string) (avail, reserved int64) {
		var l struct{ Available, Reserved int64 }
		if err := json.Unmarshal(call(w1, "level", sku), &l); err != nil {
			t.Fatal(err)
		}
		return l.Available, l.Reserved
	}
	if a, r := level("apple"); a != 3 || r != 2 {
		t.Fatalf("apple: %d available, %d reserved; want 3 and 2 (reserved once)", a, r)
	}
	if a, r := level("bread"); a != 1 || r != 0 {
		t.Fatalf("bread: %d available, %d reserved; want 1 and 0", a, r)
	}
	if o, err := admin.Get(ctx, w1); err != nil || o.Record.Owner.ID == owner.Record.Owner.ID {
		t.Fatalf("w1 owned by %v (%v): not re-activated elsewhere", o.Record.Owner, err)
	}
	// Reserving again asks for what was refused only: apple stays reserved once.
	call(w1, "stock", "bread", "5")
	call(alice, "reserve", w1)
	deadline = time.Now().Add(30 * time.Second)
	for {
		if err := json.Unmarshal(call(alice, "items"), &v); err != nil {
			t.Fatal(err)
		}
		if v.Reservations["bread"] == "reserved" && !strings.HasPrefix(v.Reservations["coffee"], "pending") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second reserve: %v", v.Reservations)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a, r := level("apple"); a != 3 || r != 2 {
		t.Fatalf("apple after the second reserve: %d available, %d reserved; want 3 and 2", a, r)
	}
	if a, r := level("bread"); a != 3 || r != 3 {
		t.Fatalf("bread after the second reserve: %d available, %d reserved; want 3 and 3", a, r)
	}
}
