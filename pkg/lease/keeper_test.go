package lease

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// patience bounds every wait for an event. Tests assert order and outcomes,
// never durations: this is only how long we wait before calling it a hang.
const patience = 30 * time.Second

var testKeys = keyspace.MustNew("/meshloc", "test")

// testConfig uses etcd's minimum TTL (2s) so that expiry tests are short.
func testConfig(t *testing.T, owner string) Config {
	c := DefaultConfig()
	c.OwnerID = owner
	c.TTL = 2 * time.Second
	c.Descriptor = Descriptor{
		RoutingID: "00112233445566778899aabbccddeeff", Address: "127.0.0.1:7100", State: StateJoining,
		Weight: 1, ApplicationVersion: "test", Types: []string{"counter", "bank"}, StartedUnixMs: 1,
	}
	c.Logger = zerolog.New(zerolog.NewTestWriter(t)).With().Timestamp().Logger()
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

// start starts a keeper that is closed when the test ends (before its client
// and etcd are, cleanups run last-in first-out).
func start(t *testing.T, c *clientv3.Client, cfg Config) *Keeper {
	t.Helper()
	k, err := Start(ctxT(t), c, testKeys, cfg)
	if err != nil {
		t.Fatalf("Start %s: %v", cfg.OwnerID, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		_ = k.Close(ctx) // may fail by design (client closed, link cut); the test checked what matters
	})
	return k
}

func getKey(t *testing.T, c *clientv3.Client, key string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := c.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

func waitDone(t *testing.T, k *Keeper, why string) {
	t.Helper()
	select {
	case <-k.Done():
	case <-time.After(patience):
		t.Fatalf("keeper not done after %s: %s", patience, why)
	}
}

func isDone(k *Keeper) bool {
	select {
	case <-k.Done():
		return true
	default:
		return false
	}
}

// waitDelete reads a watch until the DELETE of key and reports whether k was
// already done at the moment the event was received.
func waitDelete(t *testing.T, wch clientv3.WatchChan, k *Keeper) (doneFirst bool, ev *clientv3.Event) {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				t.Fatalf("watch ended: ok=%v err=%v", ok, wr.Err())
			}
			for _, e := range wr.Events {
				if e.Type == mvccpb.DELETE {
					return isDone(k), e
				}
			}
		case <-timeout:
			t.Fatalf("no DELETE of the owner key after %s", patience)
		}
	}
}

// 3. A restart of one owner id is a new owner with a larger generation; the
// key holds the JSON descriptor, bound to the lease.
func TestGenerationGrowsAcrossRestarts(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	cfg := testConfig(t, "n1")

	k1 := start(t, c, cfg)
	kv := getKey(t, c, k1.Key())
	if kv == nil {
		t.Fatal("owner key missing after Start")
	}
	if kv.CreateRevision != k1.Generation() || kv.Lease != int64(k1.LeaseID()) {
		t.Fatalf("key create revision %d lease %x, keeper generation %d lease %x", kv.CreateRevision, kv.Lease, k1.Generation(), int64(k1.LeaseID()))
	}
	got, err := DecodeDescriptor(kv.Value)
	if err != nil {
		t.Fatalf("value is not a descriptor: %v: %s", err, kv.Value)
	}
	want := cfg.Descriptor
	want.OwnerID = "n1"
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(k1.Descriptor(), want) {
		t.Fatalf("stored descriptor %+v, keeper %+v, want %+v", got, k1.Descriptor(), want)
	}
	if k1.OwnerID() != "n1" || k1.Err() != nil || k1.Status(time.Now()) != Valid {
		t.Fatalf("fresh keeper: owner %q err %v status %s", k1.OwnerID(), k1.Err(), k1.Status(time.Now()))
	}
	if err := k1.Close(ctxT(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}

	k2 := start(t, c, cfg)
	if k2.Generation() <= k1.Generation() {
		t.Fatalf("generation after restart %d, want > %d", k2.Generation(), k1.Generation())
	}
	if k2.LeaseID() == k1.LeaseID() {
		t.Fatalf("restart reused lease %x", int64(k1.LeaseID()))
	}
}

// 4a. A second live process with the same owner id is refused and changes
// nothing.
func TestDuplicateOwnerRefused(t *testing.T) {
	srv := etcdtest.Single(t)
	c1 := etcdtest.Client(t, srv.Endpoint())
	c2 := etcdtest.Client(t, srv.Endpoint())
	cfg := testConfig(t, "n1")
	k1 := start(t, c1, cfg)
	before := getKey(t, c1, k1.Key())

	cfg2 := cfg
	cfg2.Descriptor.Address = "127.0.0.1:7200"
	k2, err := Start(ctxT(t), c2, testKeys, cfg2)
	if err == nil {
		k2.Close(ctxT(t))
		t.Fatal("second Start with a live owner id succeeded")
	}
	if !errors.Is(err, ErrDuplicateOwner) {
		t.Fatalf("err %v, want ErrDuplicateOwner", err)
	}
	var dup *DuplicateOwnerError
	if !errors.As(err, &dup) {
		t.Fatalf("err %T %v, want *DuplicateOwnerError", err, err)
	}
	if dup.OwnerID != "n1" || dup.Generation != k1.Generation() || dup.Descriptor.Address != cfg.Descriptor.Address {
		t.Fatalf("DuplicateOwnerError %+v, want owner n1 generation %d address %s", dup, k1.Generation(), cfg.Descriptor.Address)
	}

	after := getKey(t, c1, k1.Key())
	if after == nil || after.CreateRevision != before.CreateRevision || after.ModRevision != before.ModRevision ||
		after.Lease != before.Lease || string(after.Value) != string(before.Value) {
		t.Fatalf("first owner's key changed: before %+v after %+v", before, after)
	}
	// The refused Start revoked the lease it granted: only k1's is left.
	leases, err := c1.Leases(ctxT(t))
	if err != nil {
		t.Fatalf("leases: %v", err)
	}
	if len(leases.Leases) != 1 || leases.Leases[0].ID != k1.LeaseID() {
		t.Fatalf("leases %+v, want only %x", leases.Leases, int64(k1.LeaseID()))
	}
	if k1.Err() != nil {
		t.Fatalf("first keeper disturbed: %v", k1.Err())
	}
}

// 4b. With AcquireWait, a restarted node waits for its crashed predecessor's
// key to expire, then becomes a new generation; the predecessor had fenced
// itself before.
func TestAcquireWaitAfterCrash(t *testing.T) {
	srv := etcdtest.Single(t)
	watcher := etcdtest.Client(t, srv.Endpoint())
	c2 := etcdtest.Client(t, srv.Endpoint())
	c1, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c1.Close() })
	cfg := testConfig(t, "n1")
	k1 := start(t, c1, cfg)
	wctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	wch := watcher.Watch(wctx, k1.Key(), clientv3.WithRev(k1.Generation()+1))

	// Crash: the process vanishes without revoking; its key lives until the TTL.
	c1.Close()
	if getKey(t, watcher, k1.Key()) == nil {
		t.Fatal("owner key gone right after the crash; the test needs it to outlive the client")
	}

	cfg2 := cfg
	cfg2.AcquireWait = patience
	k2 := start(t, c2, cfg2)
	if !isDone(k1) {
		t.Fatal("successor acquired the owner id while the crashed keeper had not fenced itself")
	}
	if !errors.Is(k1.Err(), ErrLeaseExpired) {
		t.Fatalf("crashed keeper: %v, want ErrLeaseExpired", k1.Err())
	}
	_, del := waitDelete(t, wch, k1)
	if k2.Generation() <= del.Kv.ModRevision || k2.Generation() <= k1.Generation() {
		t.Fatalf("generation %d, want > the expiry deletion (rev %d) and > %d", k2.Generation(), del.Kv.ModRevision, k1.Generation())
	}
	if kv := getKey(t, c2, k2.Key()); kv == nil || kv.Lease != int64(k2.LeaseID()) {
		t.Fatalf("successor key %+v, want bound to lease %x", kv, int64(k2.LeaseID()))
	}
}

// 5. Self-fencing: cut the keeper from etcd; it is done before etcd deletes
// its key by lease expiry.
func TestSelfFencingBeforeExpiry(t *testing.T) {
	srv := etcdtest.Single(t)
	direct := etcdtest.Client(t, srv.Endpoint())
	p, err := tcpproxy.New("127.0.0.1:0", strings.TrimPrefix(srv.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	viaProxy := etcdtest.Client(t, p.Addr())
	k := start(t, viaProxy, testConfig(t, "n1"))

	wctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	wch := direct.Watch(wctx, k.Key(), clientv3.WithRev(k.Generation()+1))

	p.SetMode(tcpproxy.Blackhole)
	doneFirst, ev := waitDelete(t, wch, k)
	if !doneFirst {
		t.Fatal("etcd deleted the owner key by expiry while the keeper still considered itself valid")
	}
	if ev.Kv.ModRevision <= k.Generation() {
		t.Fatalf("delete at revision %d, not after generation %d", ev.Kv.ModRevision, k.Generation())
	}
	if err := k.Err(); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("Err %v, want ErrLeaseExpired", err)
	}
	if cause := context.Cause(k.Ctx()); !errors.Is(cause, ErrLeaseExpired) {
		t.Fatalf("Ctx cause %v, want ErrLeaseExpired", cause)
	}
	if s := k.Status(time.Now()); s != Expired {
		t.Fatalf("status %s, want expired", s)
	}
	deadline := k.Deadline()

	// Heal: the fenced keeper stays fenced and never writes again.
	p.SetMode(tcpproxy.Forward)
	p.ResetConns()
	if _, err := k.Update(ctxT(t), func(d *Descriptor) { d.State = StateServing }); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("Update after fencing: %v, want ErrLeaseExpired", err)
	}
	if kv := getKey(t, direct, k.Key()); kv != nil {
		t.Fatalf("owner key re-created after fencing: %+v", kv)
	}
	if !k.Deadline().Equal(deadline) {
		t.Fatalf("deadline moved after fencing: %s → %s", deadline, k.Deadline())
	}
	if err := k.Close(ctxT(t)); err != nil {
		t.Fatalf("Close after heal: %v", err)
	}
	if !errors.Is(k.Err(), ErrLeaseExpired) {
		t.Fatalf("Close replaced the first cause: %v", k.Err())
	}
}

// 6. Update is a CAS on the owner's own key, which stays bound to the lease;
// it adopts a concurrent change; after fencing it is refused.
func TestUpdate(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	other := etcdtest.Client(t, srv.Endpoint())
	k := start(t, c, testConfig(t, "n1"))

	d, err := k.Update(ctxT(t), func(d *Descriptor) {
		d.State = StateServing
		d.Weight = 3
		d.OwnerID = "someone-else" // not mutable: restored
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if d.State != StateServing || d.Weight != 3 || d.OwnerID != "n1" {
		t.Fatalf("Update returned %+v", d)
	}
	kv := getKey(t, c, k.Key())
	stored, err := DecodeDescriptor(kv.Value)
	if err != nil || !reflect.DeepEqual(stored, d) || !reflect.DeepEqual(k.Descriptor(), d) {
		t.Fatalf("stored %+v (%v), keeper %+v, want %+v", stored, err, k.Descriptor(), d)
	}
	if kv.Lease != int64(k.LeaseID()) || kv.CreateRevision != k.Generation() || kv.ModRevision <= k.Generation() {
		t.Fatalf("after Update: lease %x create %d mod %d; want lease %x create %d", kv.Lease, kv.CreateRevision, kv.ModRevision, int64(k.LeaseID()), k.Generation())
	}

	// Another writer (e.g. an operator's drain) changes the descriptor, keeping
	// the lease: the next Update re-reads, builds on it, and succeeds.
	ext := stored
	ext.Address = "127.0.0.1:7999"
	if _, err := other.Put(ctxT(t), k.Key(), string(ext.Encode()), clientv3.WithLease(k.LeaseID())); err != nil {
		t.Fatal(err)
	}
	calls := 0
	d, err = k.Update(ctxT(t), func(d *Descriptor) { calls++; d.State = StateDraining })
	if err != nil {
		t.Fatalf("Update after a concurrent change: %v", err)
	}
	if d.Address != ext.Address || d.State != StateDraining || calls != 2 {
		t.Fatalf("Update %+v after %d calls, want the external address kept, draining, 2 calls", d, calls)
	}
	if kv := getKey(t, c, k.Key()); kv.Lease != int64(k.LeaseID()) {
		t.Fatalf("key detached from the lease: %x", kv.Lease)
	}

	// Fenced (lease revoked): refused, and nothing is written.
	if _, err := other.Revoke(ctxT(t), k.LeaseID()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, k, "lease revoked")
	if _, err := k.Update(ctxT(t), func(d *Descriptor) { d.Weight = 9 }); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Update after fencing: %v, want ErrLeaseLost", err)
	}
	if kv := getKey(t, c, k.Key()); kv != nil {
		t.Fatalf("owner key written after fencing: %+v", kv)
	}
}

// 6b. An Update that finds its key deleted fences the keeper at once.
func TestUpdateKeyGoneFences(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	other := etcdtest.Client(t, srv.Endpoint())
	k := start(t, c, testConfig(t, "n1"))
	if _, err := other.Delete(ctxT(t), k.Key()); err != nil {
		t.Fatal(err)
	}
	_, err := k.Update(ctxT(t), func(d *Descriptor) { d.State = StateServing })
	if !errors.Is(err, ErrLeaseLost) || !isDone(k) || !errors.Is(k.Err(), ErrLeaseLost) {
		t.Fatalf("Update on a deleted key: %v, done %v, Err %v; want ErrLeaseLost and fenced", err, isDone(k), k.Err())
	}
	if kv := getKey(t, c, k.Key()); kv != nil {
		t.Fatalf("Update re-created the key: %+v", kv)
	}
}

// 7. Close revokes the lease: the key is gone as soon as Close returns.
func TestCloseRevokes(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	k := start(t, c, testConfig(t, "n1"))
	if err := k.Close(ctxT(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if kv := getKey(t, c, k.Key()); kv != nil {
		t.Fatalf("owner key still there after Close: %+v", kv)
	}
	ttl, err := c.TimeToLive(ctxT(t), k.LeaseID())
	if err != nil || ttl.TTL != -1 {
		t.Fatalf("lease after Close: %+v %v, want revoked (TTL -1)", ttl, err)
	}
	if !isDone(k) || !errors.Is(k.Err(), ErrClosed) || k.Status(time.Now()) != Closed {
		t.Fatalf("after Close: done %v err %v status %s", isDone(k), k.Err(), k.Status(time.Now()))
	}
	if err := k.Close(ctxT(t)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := k.Update(ctxT(t), func(d *Descriptor) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Update after Close: %v, want ErrClosed", err)
	}
}

// 8. Another client revokes the lease: the keeper learns it from its next
// keep-alive and is done with ErrLeaseLost.
func TestLeaseRevokedExternally(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	other := etcdtest.Client(t, srv.Endpoint())
	k := start(t, c, testConfig(t, "n1"))
	if _, err := other.Revoke(ctxT(t), k.LeaseID()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, k, "lease revoked by another client")
	if !errors.Is(k.Err(), ErrLeaseLost) || !errors.Is(context.Cause(k.Ctx()), ErrLeaseLost) {
		t.Fatalf("Err %v cause %v, want ErrLeaseLost", k.Err(), context.Cause(k.Ctx()))
	}
	if s := k.Status(time.Now()); s != Lost {
		t.Fatalf("status %s, want lost", s)
	}
	if err := k.Close(ctxT(t)); err != nil {
		t.Fatalf("Close of a lost keeper: %v (revoking a missing lease is not an error)", err)
	}
}

// The keeper stays valid across many keep-alive intervals on a healthy link.
func TestKeepAliveKeepsValid(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	k := start(t, c, testConfig(t, "n1"))
	first := k.Deadline()
	// Wait for the deadline to move three times: each move is a confirmed keep-alive.
	for moves := 0; moves < 3; {
		d := k.Deadline()
		select {
		case <-k.Done():
			t.Fatalf("keeper fenced on a healthy link: %v", k.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if k.Deadline().After(d) {
			moves++
		}
	}
	if !k.Deadline().After(first) || k.Err() != nil {
		t.Fatalf("deadline %s (first %s), err %v", k.Deadline(), first, k.Err())
	}
	if kv := getKey(t, c, k.Key()); kv == nil || kv.CreateRevision != k.Generation() {
		t.Fatalf("owner key %+v", kv)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	_, err := Start(context.Background(), nil, testKeys, testConfig(t, "n1"))
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil client: %v", err)
	}
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	cfg := testConfig(t, "bad/id")
	if _, err := Start(ctxT(t), c, testKeys, cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad owner id: %v", err)
	}
	resp, err := c.Get(ctxT(t), testKeys.OwnersPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("a refused Start wrote %d keys (%v)", resp.Count, err)
	}
}
