package hostile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/internal/etcdauth"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A certificate withdrawn with meshctl certs revoke (the CA's list, read
// again on SIGHUP, by etcd at each connection) is refused on every port:
// an admin's on a node's gRPC port and on the API, a node's etcd user's by
// etcd. Certificates not on the list go on working.
func TestRevokedCertificateRefused(t *testing.T) {
	c := cluster(t, 1, chaos.Config{TLS: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := mtls.Add(c.CertDir(), mtls.InitOptions{Nodes: []string{"n9"}, Clients: []mtls.Identity{{Role: mtls.RoleAdmin, Name: "mallory"}}}); err != nil {
		t.Fatal(err)
	}
	if err := etcdauth.AddNodes(ctx, c.Etcd(), c.Keys(), []string{"n9"}); err != nil {
		t.Fatal(err)
	}
	addr := owners(t, c)["n1"].Address
	nodeCall := func(name string) error {
		cc := dialAs(t, c, addr, name)
		defer cc.Close()
		op := wire.NewOperationID()
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, err := rpcpb.NewCallServiceClient(cc).Call(cctx, &pb.CallRequest{Version: wire.Version, Object: "actor/counter/rv", Method: "get", OperationId: op[:]})
		return err
	}
	apiGet := func(name string) error {
		r, err := mtls.Load(c.Files(name))
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: r.ClientConfig(mtls.WantRole(mtls.RoleLocationd))}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: tr}).Get(c.API(0) + "/v1/owners")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	etcdPut := func(name string) error {
		ecfg, err := c.EtcdAccess(name).ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		ecfg.DialTimeout = 3 * time.Second
		cli, err := clientv3.New(ecfg)
		if err != nil {
			return err
		}
		defer cli.Close()
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		defer pcancel()
		_, err = cli.Put(pctx, c.Keys().Owner("n9"), "{}")
		return err
	}
	for what, err := range map[string]error{"node": nodeCall("mallory"), "API": apiGet("mallory"), "etcd": etcdPut(mtls.EtcdNodeFile("n9"))} {
		if err != nil {
			t.Fatalf("before revocation, %s: %v", what, err)
		}
	}
	if _, err := mtls.Revoke(c.CertDir(), []string{"mallory", mtls.EtcdNodeFile("n9")}, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the revoked certificates refused", func() error {
		for what, err := range map[string]error{"node": nodeCall("mallory"), "API": apiGet("mallory"), "etcd": etcdPut(mtls.EtcdNodeFile("n9"))} {
			if err == nil {
				return fmt.Errorf("%s accepted the revoked certificate", what)
			}
			t.Logf("%s: %v", what, err)
		}
		return nil
	})
	if err := nodeCall("admin"); err != nil {
		t.Fatalf("the admin, not revoked, at the node: %v", err)
	}
	if err := apiGet("admin"); err != nil {
		t.Fatalf("the admin, not revoked, at the API: %v", err)
	}
}
