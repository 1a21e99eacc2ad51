package hostile_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// strangerFiles are the certificates of another CA (a valid node n1 and an
// admin, as far as that CA goes).
func strangerFiles(t *testing.T) (node, admin mtls.Files) {
	t.Helper()
	dir := t.TempDir()
	if _, err := mtls.Init(dir, mtls.InitOptions{Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	f := func(n string) mtls.Files {
		return mtls.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, n+".crt"), Key: filepath.Join(dir, n+".key")}
	}
	return f("n1"), f("admin")
}

// A secured cluster refuses, on every port, a client without a certificate
// and a client whose certificate another CA signed: the nodes' gRPC port,
// locationd's API, and the embedded etcd's client port.
func TestTLSRefusesStrangers(t *testing.T) {
	c := cluster(t, 1, chaos.Config{TLS: true})
	node := c.Node("n1").Address
	strangerNode, strangerAdmin := strangerFiles(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noCert := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}) //nolint:gosec // the stranger trusts anything
	other, err := mtls.Load(strangerNode)
	if err != nil {
		t.Fatal(err)
	}
	op := wire.NewOperationID()
	req := &pb.CallRequest{Version: wire.Version, Object: "actor/counter/x", Method: "get", OperationId: op[:]}
	for name, creds := range map[string]credentials.TransportCredentials{"no certificate": noCert,
		"another CA's node certificate": credentials.NewTLS(otherCAClient(other))} {
		cc, err := grpc.NewClient(node, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = rpcpb.NewCallServiceClient(cc).Call(rctx, req)
		rcancel()
		cc.Close()
		if err == nil || status.Code(err) == codes.OK {
			t.Errorf("node gRPC with %s: call answered", name)
		} else {
			t.Logf("node gRPC with %s: %v", name, status.Code(err))
		}
	}
	plain := dial(t, node)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := rpcpb.NewCallServiceClient(plain).Call(rctx, req); err == nil {
		t.Error("node gRPC in plaintext: call answered")
	}
	rcancel()

	otherAdmin, err := mtls.Load(strangerAdmin)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]*tls.Config{"no certificate": {InsecureSkipVerify: true}, //nolint:gosec
		"another CA's admin certificate": otherCAClient(otherAdmin)} {
		tr := &http.Transport{TLSClientConfig: tc}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(c.API(0) + "/v1/owners")
		tr.CloseIdleConnections()
		if err == nil {
			resp.Body.Close()
			t.Errorf("locationd API with %s: %s", name, resp.Status)
		}
	}
	if resp, err := hc.Get("http://" + c.Members()[0].HTTP + "/v1/owners"); err == nil {
		// Closed whatever the status: a body left open keeps its
		// connection (and two goroutines) out of the idle pool, which
		// goleak then reports.
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("locationd API in plaintext answered 200")
		}
	}

	// mtls.Etcd refuses a client certificate of another CA before dialing,
	// so the stranger's certificate is put in by hand: it is etcd that
	// must turn it away.
	stranger, err := tls.LoadX509KeyPair(strangerAdmin.Cert, strangerAdmin.Key)
	if err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string][]tls.Certificate{
		"no certificate":           nil,
		"another CA's certificate": {stranger},
	} {
		ecfg, err := mtls.Etcd{Endpoints: c.EtcdEndpoints(), CACert: c.Files("admin").CA}.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		ecfg.TLS.Certificates = certs
		ecfg.DialTimeout = 3 * time.Second
		cli, err := clientv3.New(ecfg)
		if err == nil {
			rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
			_, err = cli.Put(rctx, c.Keys().Base()+"x", "1")
			rcancel()
			cli.Close()
		}
		if err == nil {
			t.Errorf("etcd with %s: a write was accepted", name)
		}
	}
}

// otherCAClient presents the stranger's certificate and trusts anything
// (it is the server that must refuse).
func otherCAClient(r *mtls.Reloader) *tls.Config {
	cfg := r.ClientConfig(nil)
	cfg.VerifyConnection = nil
	return cfg
}

// Roles: a viewer reads and calls, but relocating or draining — through
// the API or straight at a node's AdminService — is permission_denied, and
// so is an admin speaking the node-to-node protocol; an operator relocates.
func TestTLSRoles(t *testing.T) {
	c := cluster(t, 2, chaos.Config{TLS: true})
	cl := newClient(t, c)
	add(t, cl, "actor/counter/r1", 1)
	src, dst := ownerOf(t, c, "actor/counter/r1")
	before := etcdState(t, c, "")
	viewer := apiClient(t, c, "viewer")
	for _, p := range []struct{ path, body string }{
		{"/v1/relocations", `{"object":"actor/counter/r1"}`},
		{"/v1/owners/" + src + "/drain", `{"stopAfter":false}`},
		{"/v1/rebalance", `{"budget":1}`},
		{"/v1/groups", `{"group":"group/v"}`},
	} {
		resp, err := viewer.Post(c.API(0)+p.path, "application/json", strings.NewReader(p.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("viewer POST %s: %s, want 403 permission_denied", p.path, resp.Status)
		}
	}
	if resp, err := viewer.Get(c.API(0) + "/v1/owners"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("viewer GET /v1/owners: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// The dashboard and the event stream are reads: a viewer sees them (its
	// buttons are the POSTs refused above), and the stream's sources work
	// over mutual TLS: locationd reads every node's WatchEvents with its
	// own certificate.
	if resp, err := viewer.Get(c.API(0) + "/"); err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("viewer GET /: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := viewer.Get(c.API(0) + "/v1/events?types=watch")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("viewer GET /v1/events: %v %v", resp, err)
	}
	connected := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for len(connected) < 2 && sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		var w struct {
			Node      string
			Connected bool
			Error     string
		}
		if ok && json.Unmarshal([]byte(line), &w) == nil {
			if w.Connected {
				connected[w.Node] = true
			} else if w.Error != "" {
				t.Logf("event stream: %s: %s", w.Node, w.Error)
			}
		}
	}
	resp.Body.Close()
	if len(connected) < 2 {
		t.Errorf("the event stream under TLS reached %v, want both nodes (%v)", connected, sc.Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodeAddr := owners(t, c)[src].Address
	va := rpcpb.NewAdminServiceClient(dialAs(t, c, nodeAddr, "viewer"))
	if _, err := va.Relocate(ctx, &pb.RelocateCommand{Object: "actor/counter/r1"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("viewer AdminService.Relocate: %v, want PermissionDenied", err)
	}
	ds, err := va.Drain(ctx, &pb.DrainRequest{})
	if err == nil {
		_, err = ds.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("viewer AdminService.Drain: %v, want PermissionDenied", err)
	}
	if _, err := rpcpb.NewAdminServiceClient(dialAs(t, c, nodeAddr, dst)).Relocate(ctx, &pb.RelocateCommand{Object: "actor/counter/r1"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a node's certificate on AdminService.Relocate: %v, want PermissionDenied", err)
	}
	ps, err := rpcpb.NewPeerServiceClient(dialAs(t, c, nodeAddr, "admin")).Relocate(ctx)
	if err == nil {
		_, err = ps.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("admin on PeerService.Relocate: %v, want PermissionDenied", err)
	}
	// A gateway's forward stream is for nodes: a client certificate cannot
	// open one (it calls through CallService, where the owner checks it).
	fs, err := rpcpb.NewPeerServiceClient(dialAs(t, c, nodeAddr, "viewer")).Forward(ctx)
	if err == nil {
		fop := wire.NewOperationID()
		_ = fs.Send(&pb.ForwardRequest{Id: 1, Call: &pb.CallRequest{Version: wire.Version, Object: "actor/counter/r1", Method: "get", OperationId: fop[:]}})
		_, err = fs.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("viewer on PeerService.Forward: %v, want PermissionDenied", err)
	}
	op := wire.NewOperationID()
	rep, err := rpcpb.NewCallServiceClient(dialAs(t, c, nodeAddr, "viewer")).Call(ctx, &pb.CallRequest{Version: wire.Version, Object: "actor/counter/r1", Method: "get", OperationId: op[:]})
	if err != nil || rep.GetCode() != pb.Code_CODE_OK {
		t.Errorf("viewer call: %v %v", rep, err)
	}
	if after := etcdState(t, c, ""); !equalState(before, after) {
		t.Fatalf("refused operations changed etcd: %v", diffState(before, after))
	}
	if _, err := rpcpb.NewAdminServiceClient(dialAs(t, c, nodeAddr, "operator")).Relocate(ctx, &pb.RelocateCommand{Object: "actor/counter/r1", Target: dst}); err != nil {
		t.Fatalf("operator relocate: %v", err)
	}
}

// etcd's roles: a node's etcd user reads the cluster's prefix and writes
// what its role needs, and never another node's owner key; locationd's
// reads and writes the cluster's prefix and nothing else; root writes
// anywhere.
func TestTLSEtcdRolesLimited(t *testing.T) {
	c := cluster(t, 2, chaos.Config{TLS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, user := range []string{mtls.EtcdNodeFile("n1"), "etcd-locationd"} {
		ecfg, err := c.EtcdAccess(user).ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		cli, err := clientv3.New(ecfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Get(ctx, c.Keys().Base(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
			t.Errorf("%s reading its prefix: %v", user, err)
		}
		for _, k := range []string{"/elsewhere", "/meshloc/other/authority/x"} {
			if _, err := cli.Put(ctx, k, "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
				t.Errorf("%s writing %s: %v, want permission denied", user, k, err)
			}
		}
		cli.Close()
	}
	// n1's identity against n2's owner key: no rewrite, no delete, no
	// revocation of its lease; n2 serves on.
	before := etcdState(t, c, "owners/")
	ecfg, err := c.EtcdAccess(mtls.EtcdNodeFile("n1")).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	n1, err := clientv3.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Close()
	key := c.Keys().Owner("n2")
	resp, err := n1.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("n1 reading n2's owner key: %v %v", resp, err)
	}
	if _, err := n1.Put(ctx, key, `{"address":"127.0.0.1:1"}`); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("n1 rewriting n2's owner key: %v, want permission denied", err)
	}
	if _, err := n1.Delete(ctx, key); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("n1 deleting n2's owner key: %v, want permission denied", err)
	}
	if _, err := n1.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("n1 revoking n2's lease: %v, want permission denied", err)
	}
	if after := etcdState(t, c, "owners/"); !equalState(before, after) {
		t.Fatalf("owner keys changed: %v", diffState(before, after))
	}
	if _, err := c.Etcd().Put(ctx, "/elsewhere", "1"); err != nil {
		t.Fatalf("root: %v", err)
	}
}
