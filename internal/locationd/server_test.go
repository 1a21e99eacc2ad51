package locationd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// running is an in-process Server on free ports in a temporary data dir.
type running struct {
	srv    *Server
	base   string // http://127.0.0.1:port
	api    *client.Admin
	cancel context.CancelFunc
	done   chan error
}

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}

// start runs a Server until the test ends (or stop is called). hooks run
// on the Server before Run.
func start(t *testing.T, mutate func(*Config), hooks ...func(*Server)) *running {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.ListenClient = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.ListenPeer = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.HTTP = "127.0.0.1:0"
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, h := range hooks {
		h(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	select {
	case <-srv.Ready():
	case err := <-r.done:
		r.done <- err
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("server not ready after 60s")
	}
	r.base = "http://" + srv.HTTPAddr()
	if r.api, err = client.NewAdmin(r.base, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// stop cancels Run and waits for it to return (at most 30s); idempotent.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30s after cancel")
	}
}

func (r *running) etcd(t *testing.T) *clientv3.Client {
	return etcdtest.Client(t, r.srv.EtcdEndpoints()...)
}

// startOwner creates owners/<id> through the lease keeper, closed at the end
// of the test unless the test closes it first.
func startOwner(t *testing.T, c *clientv3.Client, id string) *lease.Keeper {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k, err := lease.Start(ctx, c, keyspace.Default(), lease.Config{
		OwnerID: id,
		TTL:     5 * time.Second,
		Descriptor: lease.Descriptor{
			RoutingID: strings.Repeat("ab", 16), Address: "127.0.0.1:7100", State: lease.StateServing,
			Weight: 1, ApplicationVersion: "v1", Types: []string{"counter"}, StartedUnixMs: 1_700_000_000_000,
		},
	})
	if err != nil {
		t.Fatalf("lease.Start %s: %v", id, err)
	}
	t.Cleanup(func() { _ = k.Close(context.Background()) })
	return k
}

func activate(t *testing.T, st *authority.Store, name string, k *lease.Keeper) authority.Snapshot {
	t.Helper()
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Activate(context.Background(), authority.ActivateRequest{
		Object: obj,
		Owner:  authority.OwnerRef{ID: k.OwnerID(), Generation: k.Generation()},
		Node:   authority.NodeRef{RoutingID: strings.Repeat("ab", 16), Address: "127.0.0.1:7100"},
	})
	if err != nil || !res.Won {
		t.Fatalf("activate %s: won=%v err=%v", name, res.Won, err)
	}
	return res.Snapshot
}

func names(objs []api.Object) string {
	var s []string
	for _, o := range objs {
		s = append(s, fmt.Sprintf("%s:%v", o.Object, o.OwnerAlive))
	}
	return strings.Join(s, " ")
}

func TestAPI(t *testing.T) {
	r := start(t, nil)
	c := r.etcd(t)
	st := authority.New(c, keyspace.Default())
	ctx := context.Background()

	n1 := startOwner(t, c, "n1")
	n2 := startOwner(t, c, "n2")
	activate(t, st, "actor/counter/c1", n1)
	c2 := activate(t, st, "actor/counter/c2", n2)
	activate(t, st, "group/g1", n1)

	t.Run("owners", func(t *testing.T) {
		got, raw, err := r.api.Owners(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Owners) != 2 || got.Owners[0].ID != "n1" || got.Owners[1].ID != "n2" {
			t.Fatalf("owners = %s", raw)
		}
		o := got.Owners[0]
		if o.Generation != n1.Generation() || o.LeaseID != fmt.Sprintf("%016x", int64(n1.LeaseID())) ||
			o.State != "serving" || o.Weight != 1 || o.ApplicationVersion != "v1" || o.Address != "127.0.0.1:7100" ||
			o.RoutingID != strings.Repeat("ab", 16) || len(o.Types) != 1 || o.Started != "2023-11-14T22:13:20.000Z" {
			t.Fatalf("owner n1 = %+v", o)
		}
		if got.Revision == 0 {
			t.Fatal("no revision")
		}
		// The JSON names are the API's contract.
		for _, field := range []string{`"id"`, `"generation"`, `"routingId"`, `"address"`, `"state"`, `"weight"`, `"applicationVersion"`, `"types"`, `"started"`, `"leaseId"`} {
			if !strings.Contains(string(raw), field) {
				t.Errorf("owners JSON lacks %s: %s", field, raw)
			}
		}
	})

	t.Run("objects", func(t *testing.T) {
		for _, tc := range []struct {
			q    api.ObjectsQuery
			want string
		}{
			{api.ObjectsQuery{}, "actor/counter/c1:true actor/counter/c2:true group/g1:true"},
			{api.ObjectsQuery{Kind: "group"}, "group/g1:true"},
			{api.ObjectsQuery{Kind: "actor", Owner: "n1"}, "actor/counter/c1:true"},
			{api.ObjectsQuery{Owner: "n2"}, "actor/counter/c2:true"},
			{api.ObjectsQuery{Owner: "nobody"}, ""},
			{api.ObjectsQuery{Orphaned: new(true)}, ""},
			{api.ObjectsQuery{Orphaned: new(false)}, "actor/counter/c1:true actor/counter/c2:true group/g1:true"},
		} {
			got, raw, err := r.api.Objects(ctx, tc.q)
			if err != nil {
				t.Fatalf("%v: %v", tc.q.Values(), err)
			}
			if names(got.Objects) != tc.want {
				t.Errorf("%v: got %q, want %q (%s)", tc.q.Values(), names(got.Objects), tc.want, raw)
			}
		}
	})

	// Pages: chained by next at the first page's revision, the same objects
	// as one listing; an object created meanwhile is not among them.
	t.Run("pages", func(t *testing.T) {
		for _, tc := range []struct {
			q    api.ObjectsQuery
			want string
		}{
			{api.ObjectsQuery{Limit: 1}, "actor/counter/c1:true actor/counter/c2:true group/g1:true"},
			{api.ObjectsQuery{Limit: 2, Contains: "counter/"}, "actor/counter/c1:true actor/counter/c2:true"},
			{api.ObjectsQuery{Limit: 10, Contains: "c2"}, "actor/counter/c2:true"},
			{api.ObjectsQuery{Contains: "g"}, "group/g1:true"},
			{api.ObjectsQuery{Limit: 1, After: "actor/counter/c1", Kind: "actor"}, "actor/counter/c2:true"},
		} {
			func() {
				q, all, pages := tc.q, "", 0
				for {
					got, raw, err := r.api.Objects(ctx, q)
					if err != nil {
						t.Fatalf("%v: %v", q.Values(), err)
					}
					if q.Limit > 0 && len(got.Objects) > q.Limit || q.Revision != 0 && got.Revision != q.Revision {
						t.Fatalf("%v: %s", q.Values(), raw)
					}
					if pages++; pages == 1 && tc.q.Limit == 1 {
						activate(t, st, "actor/counter/meanwhile", n1)
						defer c.Delete(ctx, keyspace.Default().Authority(keyspace.Actor("counter", "meanwhile")))
					}
					all = strings.TrimSpace(all + " " + names(got.Objects))
					if got.Next == "" {
						break
					}
					q.After, q.Revision = got.Next, got.Revision
				}
				if all != tc.want {
					t.Errorf("%v: pages gave %q, want %q", tc.q.Values(), all, tc.want)
				}
				// The client's EachObject reads the same pages.
				if tc.q.Limit == 1 {
					return // its object made meanwhile is listed at a newer revision
				}
				var each []api.Object
				if _, err := r.api.EachObject(ctx, tc.q, func(o api.Object) error { each = append(each, o); return nil }); err != nil || names(each) != tc.want {
					t.Errorf("%v: EachObject gave %q: %v", tc.q.Values(), names(each), err)
				}
			}()
		}
	})

	t.Run("get", func(t *testing.T) {
		got, raw, err := r.api.Object(ctx, "actor/counter/c2")
		if err != nil {
			t.Fatal(err)
		}
		if got.Object.Object != "actor/counter/c2" || !got.OwnerAlive || got.StoreVersion != c2.StoreVersion ||
			got.Record.Owner != c2.Record.Owner || got.Record.ObjectGeneration != 1 || got.Revision < got.StoreVersion {
			t.Fatalf("get = %s", raw)
		}
		for _, field := range []string{`"object":"actor/counter/c2"`, `"record":{`, `"storeVersion"`, `"revision"`, `"ownerAlive":true`, `"objectGeneration":1`} {
			if !strings.Contains(string(raw), field) {
				t.Errorf("get JSON lacks %s: %s", field, raw)
			}
		}
	})

	// n2 goes away: its key is deleted, its object is orphaned.
	if err := n2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// n1 restarts: a new generation of the same id; its objects name the old one.
	if err := n1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n1b := startOwner(t, c, "n1")
	if n1b.Generation() == n1.Generation() {
		t.Fatal("restart kept the generation")
	}

	t.Run("orphaned", func(t *testing.T) {
		for _, tc := range []struct {
			q    api.ObjectsQuery
			want string
		}{
			{api.ObjectsQuery{Orphaned: new(true)}, "actor/counter/c1:false actor/counter/c2:false group/g1:false"},
			{api.ObjectsQuery{Orphaned: new(false)}, ""},
			{api.ObjectsQuery{Orphaned: new(true), Owner: "n2"}, "actor/counter/c2:false"},
		} {
			got, raw, err := r.api.Objects(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if names(got.Objects) != tc.want {
				t.Errorf("%v: got %q, want %q (%s)", tc.q.Values(), names(got.Objects), tc.want, raw)
			}
		}
		got, _, err := r.api.Object(ctx, "actor/counter/c1")
		if err != nil || got.OwnerAlive {
			t.Fatalf("c1 after its owner restarted: alive=%v err=%v", got.OwnerAlive, err)
		}
		owners, _, err := r.api.Owners(ctx)
		if err != nil || len(owners.Owners) != 1 || owners.Owners[0].Generation != n1b.Generation() {
			t.Fatalf("owners after restart: %+v %v", owners, err)
		}
	})
}

// rawGet returns status, content type and body of a request.
func rawGet(t *testing.T, method, url string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// docs/design.md §9.5: bad input gets a typed error and changes nothing.
func TestBadInput(t *testing.T) {
	r := start(t, nil)
	c := r.etcd(t)
	n1 := startOwner(t, c, "n1")
	activate(t, authority.New(c, keyspace.Default()), "actor/counter/c1", n1)

	revision := func() string { return storeState(t, c) }
	before := revision()
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/objects/actor/counter", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects/", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects/actor/co%20unter/c1", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects/thing/x/y", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects/group/g1/extra", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects/actor/counter/c1?x=1", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?kind=thing", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?kind=", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?orphaned=yes", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?orphaned=", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?owner=a%2Fb", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?owner=", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?ownr=n1", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?kind=actor&kind=group", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?kind=%zz", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?contains=", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?contains=" + strings.Repeat("x", api.MaxContains+1), 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?limit=0", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?limit=10001", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?limit=05", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?limit=x", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?limit=5&after=actor%2Fcounter", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?limit=5&revision=0", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?limit=5&revision=%2B3", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?after=actor%2Fcounter%2Fc1", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects?revision=3", 400, api.CodeInvalidArgument},
		{"GET", "/v1/owners?all=1", 400, api.CodeInvalidArgument},
		// Not canonical: a typed 400, not the mux's redirect to another route.
		{"GET", "/v1/objects/../owners", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects/..%2Fowners", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects/actor/counter/./c1", 400, api.CodeInvalidArgument},
		{"GET", "/v1//owners", 400, api.CodeInvalidArgument},
		{"POST", "/v1/owners/../relocations", 400, api.CodeInvalidArgument},
		{"GET", "/v1/objects/actor/counter/missing", 404, api.CodeNotFound},
		{"GET", "/v1/nothing", 404, api.CodeNotFound},
		{"GET", "/ui/nothing.js", 404, api.CodeNotFound},
		{"GET", "/index.html", 404, api.CodeNotFound},
		{"POST", "/", 405, api.CodeMethodNotAllowed},
		{"POST", "/ui/app.js", 405, api.CodeMethodNotAllowed},
		{"POST", "/v1/objects", 405, api.CodeMethodNotAllowed},
		{"PUT", "/v1/objects/actor/counter/c1", 405, api.CodeMethodNotAllowed},
		{"DELETE", "/v1/objects/actor/counter/c1?force=1", 400, api.CodeInvalidArgument},
		{"DELETE", "/v1/objects/group/missing", 404, api.CodeNotFound},
		{"PUT", "/v1/owners", 405, api.CodeMethodNotAllowed},
	} {
		status, ctype, body := rawGet(t, tc.method, r.base+tc.path)
		var eb api.ErrorBody
		if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
			t.Errorf("%s %s: body %q is not an error body: %v", tc.method, tc.path, body, err)
			continue
		}
		if status != tc.status || eb.Error.Code != tc.code || ctype != "application/json" || eb.Error.Message == "" {
			t.Errorf("%s %s: %d %s %q, want %d %s", tc.method, tc.path, status, ctype, body, tc.status, tc.code)
		}
	}
	if after := revision(); after != before {
		t.Errorf("bad input changed the store: %s → %s", before, after)
	}
	// The client surfaces the same typed error.
	_, _, err := r.api.Object(context.Background(), "actor/counter/missing")
	if !errors.Is(err, api.ErrNotFound) || err.Error() != "not_found: authority: object not found: actor/counter/missing" {
		t.Errorf("client error = %v", err)
	}
}

// A record that does not decode is the cluster's problem (500), not the
// caller's, and is said for what it is: corrupt_record.
func TestCorruptRecord(t *testing.T) {
	r := start(t, nil)
	c := r.etcd(t)
	// A raw Put on an authority key: only here, to simulate a corrupt value.
	if _, err := c.Put(context.Background(), keyspace.Default().Authority(keyspace.Actor("counter", "bad")), "{not json"); err != nil {
		t.Fatal(err)
	}
	status, _, body := rawGet(t, "GET", r.base+"/v1/objects/actor/counter/bad")
	if status != 500 || !strings.Contains(string(body), `"code":"corrupt_record"`) {
		t.Fatalf("corrupt record: %d %s", status, body)
	}
	// List skips it rather than failing the whole listing.
	got, _, err := r.api.Objects(context.Background(), api.ObjectsQuery{})
	if err != nil || len(got.Objects) != 0 {
		t.Fatalf("list with a corrupt record: %+v %v", got, err)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	r := start(t, nil)
	for _, p := range []string{"/healthz", "/readyz"} {
		status, _, body := rawGet(t, "GET", r.base+p)
		if status != 200 || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
			t.Errorf("%s: %d %s", p, status, body)
		}
	}
	if err := r.api.Ready(context.Background()); err != nil {
		t.Errorf("client Ready: %v", err)
	}
	rawGet(t, "GET", r.base+"/v1/objects?kind=bad")
	status, _, body := rawGet(t, "GET", r.base+"/metrics")
	if status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	for _, want := range []string{
		`meshloc_locationd_http_requests_total{code="200",route="/healthz"} 1`,
		`meshloc_locationd_http_requests_total{code="400",route="/v1/objects"} 1`,
		`meshloc_locationd_http_request_duration_seconds_bucket{route="/readyz"`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// With an etcd that does not answer, the API says unavailable (503), typed.
func TestUnavailable(t *testing.T) {
	dead := fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	r := start(t, func(c *Config) {
		c.EtcdEndpoints = []string{dead}
		c.RequestTimeout = time.Second
	})
	for _, p := range []string{"/readyz", "/v1/owners", "/v1/objects", "/v1/objects/actor/counter/c1"} {
		status, _, body := rawGet(t, "GET", r.base+p)
		if status != 503 || !strings.Contains(string(body), `"code":"unavailable"`) {
			t.Errorf("%s: %d %s", p, status, body)
		}
	}
	// Bad input is refused before etcd is asked.
	if status, _, body := rawGet(t, "GET", r.base+"/v1/objects/nope"); status != 400 {
		t.Errorf("bad name with etcd down: %d %s", status, body)
	}
	if status, _, _ := rawGet(t, "GET", r.base+"/healthz"); status != 200 {
		t.Errorf("/healthz with etcd down: %d", status)
	}
}

// Run returns after cancel, closes its port and leaves no goroutine behind.
func TestShutdown(t *testing.T) {
	r := start(t, nil)
	addr := r.srv.HTTPAddr()
	etcdAddr := strings.TrimPrefix(r.srv.EtcdEndpoints()[0], "http://")
	// A keep-alive connection in flight must not hold the shutdown.
	if status, _, _ := rawGet(t, "GET", r.base+"/v1/owners"); status != 200 {
		t.Fatal(status)
	}
	began := time.Now()
	r.stop(t)
	if d := time.Since(began); d > 15*time.Second {
		t.Errorf("shutdown took %s", d)
	}
	for _, a := range []string{addr, etcdAddr} {
		if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Run returned", a)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	goleak.VerifyNone(t)
	if err := r.srv.Run(context.Background()); !errors.Is(err, ErrAlreadyRun) {
		t.Errorf("second Run: %v", err)
	}
}

// A cancel while the embedded etcd starts is a clean stop, not an error.
func TestCancelDuringStart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.ListenClient = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.ListenPeer = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.HTTP = "127.0.0.1:0"
	srv, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Run(ctx); err != nil {
		t.Fatalf("Run with a cancelled ctx: %v", err)
	}
}

// The HTTP port is taken: Run fails, and still closes what it started.
func TestListenFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.ListenClient = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.ListenPeer = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.HTTP = l.Addr().String()
	srv, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "listen --http") {
		t.Fatalf("Run on a taken port: %v", err)
	}
}

// storeState sums up the keys bad input must not change: the last
// ModRevision and the count of every key but the recovery controller's own
// (its election key carries the leader's figures and is rewritten as they
// change).
func storeState(t *testing.T, c *clientv3.Client) string {
	t.Helper()
	resp, err := c.Get(context.Background(), "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	controllers := keyspace.Default().Controller("")
	var last int64
	n := 0
	for _, kv := range resp.Kvs {
		if !strings.HasPrefix(string(kv.Key), controllers) {
			last = max(last, kv.ModRevision)
			n++
		}
	}
	return fmt.Sprintf("%d keys, last written at revision %d", n, last)
}
