package hostile_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// An owner that notices: when etcd's record of an object it serves names
// another owner — written here straight into etcd, as a relocation nobody
// started, an operator or a bug could — the node fences the object as
// soon as its location cache shows the change: it executes no request for
// it (its execution log has no line for it after the write) and sends no
// reply under its fence; it counts the loss.
func TestStaleOwnerFencedOnRecordChange(t *testing.T) {
	c := cluster(t, 2, chaos.Config{})
	cl := newClient(t, c)
	const obj = "actor/counter/c3"
	add(t, cl, obj, 2)
	src, dst := ownerOf(t, c, obj)
	os := owners(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, _ := keyspace.ParseObject(obj)
	key := c.Keys().Authority(o)
	resp, err := c.Etcd().Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(resp, err)
	}
	r, err := record.DecodeRecord(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	r.Owner = record.OwnerRef{ID: dst, Generation: os[dst].Generation}
	r.Node = record.NodeRef{RoutingID: os[dst].RoutingID, Address: os[dst].Address}
	r.AuthorityGeneration++
	r.LastRelocation = "behind-its-back"
	written := time.Now()
	tx, err := c.Etcd().Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(key, string(r.Encode()))).Commit()
	if err != nil || !tx.Succeeded {
		t.Fatal(tx, err)
	}
	srcHTTP := c.Node(src).HTTP
	eventually(t, 10*time.Second, "the old owner notices", func() error {
		if v := metric(t, srcHTTP, "meshloc_ownership_lost_total"); v != 1 {
			return fmt.Errorf("meshloc_ownership_lost_total = %v", v)
		}
		return nil
	})
	// A request sent straight to the old owner, as to the owner it was.
	rep := directAdd(t, ctx, os[src].Address, obj)
	if rep.GetFence().GetOwnerId() == src || rep.GetCode() == pb.Code_CODE_OK {
		t.Fatalf("the old owner answered as the owner: %v %s (fence %v)", rep.GetCode(), rep.GetMessage(), rep.GetFence())
	}
	t.Logf("old owner answers %v: %s", rep.GetCode(), rep.GetMessage())
	if n := execLines(t, c.Node(src).ExecLog, obj, written); n != 0 {
		t.Fatalf("the old owner executed %d requests for %s after its record moved", n, obj)
	}
}

// directAdd sends add(1) for obj straight to the node at addr (Direct: no
// forwarding), as to the object's owner.
func directAdd(t *testing.T, ctx context.Context, addr, obj string) *pb.CallReply {
	t.Helper()
	op := wire.NewOperationID()
	rep, err := rpcpb.NewCallServiceClient(dial(t, addr)).Call(ctx, &pb.CallRequest{Version: wire.Version, Object: obj, Method: "add",
		Args: [][]byte{[]byte("1")}, OperationId: op[:], Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// execLines counts the execution log's lines for obj written after since.
func execLines(t *testing.T, path, obj string, since time.Time) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			Object string `json:"object"`
			T      int64  `json:"t"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Object == obj && l.T > since.UnixNano() {
			n++
		}
	}
	return n
}

// A record rewritten with garbage — what a node's etcd identity could do
// before each node had its own, or a damaged restore — fences its owner:
// the owner stops executing anything for the object at once, and the API
// reports the record as corrupt_record (not internal).
func TestCorruptRecordFencesOwner(t *testing.T) {
	c := cluster(t, 2, chaos.Config{})
	cl := newClient(t, c)
	const obj = "actor/counter/c4"
	add(t, cl, obj, 2)
	src, _ := ownerOf(t, c, obj)
	os := owners(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, _ := keyspace.ParseObject(obj)
	written := time.Now()
	if _, err := c.Etcd().Put(ctx, c.Keys().Authority(o), `{"garbage":true`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the owner notices", func() error {
		if v := metric(t, c.Node(src).HTTP, "meshloc_ownership_lost_total"); v != 1 {
			return fmt.Errorf("meshloc_ownership_lost_total = %v", v)
		}
		return nil
	})
	rep := directAdd(t, ctx, os[src].Address, obj)
	if rep.GetCode() == pb.Code_CODE_OK {
		t.Fatalf("the owner of a corrupt record executed a call: %v", rep)
	}
	t.Logf("the fenced owner answers %v: %s", rep.GetCode(), rep.GetMessage())
	if n := execLines(t, c.Node(src).ExecLog, obj, written); n != 0 {
		t.Fatalf("the owner executed %d requests for %s after its record was corrupted", n, obj)
	}
	resp, err := apiClient(t, c, "admin").Get(c.API(0) + "/v1/objects/" + obj)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Code != "corrupt_record" {
		t.Fatalf("GET /v1/objects/%s: %s %+v, want corrupt_record", obj, resp.Status, body.Error)
	}
	t.Logf("API: %s %s", resp.Status, body.Error.Message)
}
