package hostile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func newClient(t *testing.T, c *chaos.Cluster) *client.Client {
	t.Helper()
	cfg := client.Config{EtcdEndpoints: c.EtcdEndpoints(), Timeout: 10 * time.Second}
	if c.Secured() {
		cfg.TLS, cfg.EtcdTLS = c.Files("admin"), c.EtcdAccess("etcd-root")
	}
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// value is a counter's value read through the client, and who served it.
func value(t *testing.T, cl *client.Client, obj string) (int64, string) {
	t.Helper()
	r, err := cl.Call(context.Background(), obj, "get")
	if err != nil {
		t.Fatalf("get %s: %v", obj, err)
	}
	var v struct{ Value int64 }
	if err := json.Unmarshal(r.Payload, &v); err != nil {
		t.Fatal(err)
	}
	return v.Value, r.Fence.Owner.ID
}

func add(t *testing.T, cl *client.Client, obj string, n int) {
	t.Helper()
	if _, err := cl.Call(context.Background(), obj, "add", fmt.Sprint(n)); err != nil {
		t.Fatalf("add %s: %v", obj, err)
	}
}

// postJSON POSTs body to locationd's API.
func postJSON(t *testing.T, c *chaos.Cluster, path string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := apiClient(t, c, "admin").Post(c.API(0)+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", path, resp.Status)
	}
}

// ownerOf is the owner etcd names for obj, and another live node.
func ownerOf(t *testing.T, c *chaos.Cluster, obj string) (owner, other string) {
	t.Helper()
	r, err := record.DecodeRecord(object(t, c, obj).Record)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if n != r.Owner.ID {
			return r.Owner.ID, n
		}
	}
	t.Fatal("one node only")
	return "", ""
}

// listener counts the connections made to an address the attacker names
// as a requester: a node must never dial it.
func listener(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return l.Addr().String(), &n
}

func counterState(v int64) []byte { return []byte(fmt.Sprintf(`{"v":1,"value":%d}`, v)) }

// A relocation nobody started, sent straight to a node's gRPC port with
// every identity the API publishes, commits nothing: for a memory object, a
// durable one and a group, whether the PREPARE carries the records as etcd
// holds them (refused at PREPARE: no intent) or with an intent the attacker
// made up (consistent in itself: restored, READY, then refused by the
// commit's compare of the exact record in etcd). Afterwards no key in etcd
// changed, the owner still serves every acknowledged write, the target holds
// nothing, and the requester address the payload named was never dialled.
func TestForgedCommitRefused(t *testing.T) {
	forgedCommits(t, cluster(t, 2, chaos.Config{}), "")
}

// The same on a secured cluster (mutual TLS, etcd with authentication),
// the attacker holding a valid node certificate (n3's): a PREPARE that
// names another coordinator than the certificate's node is refused
// (permission_denied); one whose made-up records name n3 as the source
// passes that check and is refused by the commit's compare.
func TestForgedCommitRefusedWithTLS(t *testing.T) {
	forgedCommits(t, cluster(t, 3, chaos.Config{TLS: true}), "n3")
}

func forgedCommits(t *testing.T, c *chaos.Cluster, attacker string) {
	cl := newClient(t, c)
	on := "n1"
	if attacker == on {
		on = "n2"
	}
	for _, o := range []string{"actor/counter/c2", "actor/dcounter/d1"} {
		add(t, cl, o, 5)
		if src, _ := ownerOf(t, c, o); src == attacker {
			relocateTo(t, c, o, on) // the attacker is not the owner
		}
	}
	postJSON(t, c, "/v1/groups", map[string]string{"group": "group/g1", "on": on})
	for _, m := range []string{"actor/counter/m1", "actor/counter/m2"} {
		postJSON(t, c, "/v1/groups/join", map[string]string{"group": "group/g1", "actor": m})
		add(t, cl, m, 3)
	}
	trap, dialled := listener(t)
	type forge struct {
		name       string
		selfIntent bool
		claim      bool // the made-up records name the attacker's node as the source
		want       pb.Code
	}
	kinds := []forge{{"published records", false, false, pb.Code_CODE_PROTOCOL_ERROR}, {"made-up intent", true, false, pb.Code_CODE_STALE_FENCE}}
	if attacker != "" {
		kinds = []forge{{"published records", false, false, pb.Code_CODE_PERMISSION_DENIED},
			{"made-up intent", true, false, pb.Code_CODE_PERMISSION_DENIED},
			{"made-up intent naming the attacker", true, true, pb.Code_CODE_STALE_FENCE}}
	}
	for _, objects := range [][]string{{"actor/counter/c2"}, {"actor/dcounter/d1"}, {"group/g1", "actor/counter/m1", "actor/counter/m2"}} {
		for _, k := range kinds {
			t.Run(objects[0]+"/"+k.name, func(t *testing.T) {
				src, dst := ownerOf(t, c, objects[0])
				if dst == attacker {
					dst = otherThan(c, src, attacker)
				}
				want := map[string]int64{}
				for _, o := range objects {
					if strings.HasPrefix(o, "actor/") {
						want[o], _ = value(t, cl, o)
					}
				}
				hosted := metric(t, c.Node(dst).HTTP, "meshloc_hosted_objects")
				before := etcdState(t, c, "")
				f := newForgery(t, c, src, dst, objects...)
				f.selfIntent = k.selfIntent
				if k.claim {
					a := owners(t, c)[attacker]
					f.claim = &a
				}
				for _, o := range objects {
					if strings.HasPrefix(o, "actor/") {
						f.states[o] = counterState(999999)
					}
				}
				rid := wire.NewRoutingID()
				evil := func() *pb.CallRequest {
					op := wire.NewOperationID()
					return &pb.CallRequest{Version: wire.Version, Object: objects[len(objects)-1], Method: "add", Args: [][]byte{[]byte("1")},
						OperationId: op[:], Requester: &pb.Requester{OwnerId: "n9", OwnerGeneration: 1, RoutingId: rid[:], Address: trap, ReplyRoute: 7}}
				}
				f.queued = []*pb.CallRequest{evil()}
				frames := f.run(t, dialAs(t, c, owners(t, c)[dst].Address, attacker), []*pb.CallRequest{evil()})
				if len(frames) == 0 {
					t.Fatal("the target answered nothing")
				}
				last := frames[len(frames)-1]
				if k.want == pb.Code_CODE_STALE_FENCE && frames[0].GetReady() == nil {
					t.Fatalf("a self-consistent forgery should reach READY (then fail at the commit), got %v", frames[0])
				}
				if failedCode(last) != k.want {
					t.Fatalf("target's last word: %v, want FAILED %v", last, k.want)
				}
				for _, fr := range frames {
					if o := fr.GetOutcome(); o != nil && o.GetCode() == pb.Code_CODE_OK {
						t.Fatalf("the target committed a forged relocation: %v", o)
					}
				}
				t.Logf("refused: %s", last.GetFailed().GetMessage())
				if after := etcdState(t, c, ""); !equalState(before, after) {
					t.Fatalf("etcd changed: %v", diffState(before, after))
				}
				for o, v := range want {
					got, by := value(t, cl, o)
					if got != v || by != src {
						t.Fatalf("%s = %d served by %s, want %d by %s", o, got, by, v, src)
					}
				}
				eventually(t, 5*time.Second, "target holds nothing more", func() error {
					if h := metric(t, c.Node(dst).HTTP, "meshloc_hosted_objects"); h != hosted {
						return fmt.Errorf("%s hosts %v objects, %v before", dst, h, hosted)
					}
					return nil
				})
				if n := dialled.Load(); n != 0 {
					t.Fatalf("a node dialled the requester address a forged payload named (%d connections)", n)
				}
			})
		}
	}
}

// otherThan is a node that is neither a nor b.
func otherThan(c *chaos.Cluster, a, b string) string {
	for _, n := range c.Nodes() {
		if n != a && n != b {
			return n
		}
	}
	return ""
}

// relocateTo moves obj to node through the API (as an operator would).
func relocateTo(t *testing.T, c *chaos.Cluster, obj, node string) {
	t.Helper()
	postJSON(t, c, "/v1/relocations", map[string]string{"object": obj, "target": node})
}

func equalState(a, b map[string]int64) bool { return len(diffState(a, b)) == 0 }

func diffState(a, b map[string]int64) []string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, fmt.Sprintf("%s: %d → %d", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s: new at %d", k, v))
		}
	}
	return out
}
