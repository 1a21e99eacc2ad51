package hostile_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// opAt is a UUIDv7 operation id made at t (a forged time).
func opAt(t time.Time) []byte {
	u := uuid.Must(uuid.NewV7())
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (8 * (5 - i)))
	}
	return u[:]
}

// A call that every owner would refuse is refused before anything is
// routed or activated, with its typed code: no record, catalog entry or
// any other key appears in etcd for the object it names.
func TestRefusedCallsWriteNothing(t *testing.T) {
	c := cluster(t, 2, chaos.Config{})
	cc := dial(t, c.Node("n1").Address)
	call := rpcpb.NewCallServiceClient(cc)
	before := etcdState(t, c, "")
	op := func() []byte { o := wire.NewOperationID(); return o[:] }
	cases := []struct {
		name string
		req  *pb.CallRequest
		want pb.Code
	}{
		{"unknown method", &pb.CallRequest{Object: "actor/counter/fresh1", Method: "explode", OperationId: op()}, pb.Code_CODE_UNKNOWN_METHOD},
		{"operation id from the future", &pb.CallRequest{Object: "actor/counter/fresh2", Method: "add", Args: [][]byte{[]byte("1")},
			OperationId: opAt(time.Now().Add(24 * time.Hour))}, pb.Code_CODE_INVALID_OPERATION_ID},
		{"operation id expired", &pb.CallRequest{Object: "actor/counter/fresh3", Method: "add", Args: [][]byte{[]byte("1")},
			OperationId: opAt(time.Now().Add(-24 * time.Hour))}, pb.Code_CODE_OPERATION_EXPIRED},
		{"negative known generation", &pb.CallRequest{Object: "actor/counter/fresh4", Method: "get", OperationId: op(), KnownObjectGeneration: -5},
			pb.Code_CODE_INVALID_ARGUMENT},
		{"negative requester generation", &pb.CallRequest{Object: "actor/counter/fresh5", Method: "get", OperationId: op(),
			Requester: &pb.Requester{OwnerId: "x", OwnerGeneration: -1}}, pb.Code_CODE_INVALID_ARGUMENT},
		{"requester routing id of 3 bytes", &pb.CallRequest{Object: "actor/counter/fresh6", Method: "get", OperationId: op(),
			Requester: &pb.Requester{RoutingId: []byte{1, 2, 3}}}, pb.Code_CODE_INVALID_ARGUMENT},
		{"unknown type", &pb.CallRequest{Object: "actor/nosuch/x", Method: "get", OperationId: op()}, pb.Code_CODE_UNKNOWN_TYPE},
		{"unknown kind", &pb.CallRequest{Object: "thing/x", Method: "get", OperationId: op()}, pb.Code_CODE_UNKNOWN_KIND},
		{"bad name", &pb.CallRequest{Object: "actor/counter/../x", Method: "get", OperationId: op()}, pb.Code_CODE_INVALID_ARGUMENT},
		{"zero operation id", &pb.CallRequest{Object: "actor/counter/fresh7", Method: "get", OperationId: make([]byte, 16)}, pb.Code_CODE_INVALID_OPERATION_ID},
		{"too many hops", &pb.CallRequest{Object: "actor/counter/fresh8", Method: "get", OperationId: op(), Hops: 99}, pb.Code_CODE_UNAVAILABLE},
		{"wire version 7", &pb.CallRequest{Version: 7, Object: "actor/counter/fresh9", Method: "get", OperationId: op()}, pb.Code_CODE_PROTOCOL_ERROR},
	}
	for _, tc := range cases {
		if tc.req.Version == 0 {
			tc.req.Version = wire.Version
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rep, err := call.Call(ctx, tc.req)
		cancel()
		if err != nil || rep.GetCode() != tc.want || rep.GetFence() != nil {
			t.Errorf("%s: %v %v (%s), want %v without a fence", tc.name, rep.GetCode(), err, rep.GetMessage(), tc.want)
		}
	}
	if after := etcdState(t, c, ""); !equalState(before, after) {
		t.Fatalf("refused calls changed etcd: %v", diffState(before, after))
	}
}

// Admin RPCs check every field before they write or seal anything: a
// relocation timeout of -5 ms or of int64's maximum, a target that is no
// owner id, a join's negative timeout, a drain's absurd concurrency: each
// invalid_argument, nothing in etcd changed, and the object still serves.
func TestAdminRPCsValidated(t *testing.T) {
	c := cluster(t, 2, chaos.Config{})
	cl := newClient(t, c)
	add(t, cl, "actor/counter/c7", 9)
	src, _ := ownerOf(t, c, "actor/counter/c7")
	admin := rpcpb.NewAdminServiceClient(dial(t, owners(t, c)[src].Address))
	before := etcdState(t, c, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, cmd := range []*pb.RelocateCommand{
		{Object: "actor/counter/c7", TimeoutMs: -5},
		{Object: "actor/counter/c7", TimeoutMs: math.MaxInt64},
		{Object: "actor/counter/c7", Target: "../n2"},
		{Object: "actor/counter/../c7"},
	} {
		if _, err := admin.Relocate(ctx, cmd); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Relocate %v: %v, want InvalidArgument", cmd, err)
		}
	}
	if _, err := admin.JoinGroup(ctx, &pb.GroupCommand{Group: "group/g9", Actor: "actor/counter/c7", TimeoutMs: -1}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("JoinGroup with a negative timeout: %v, want InvalidArgument", err)
	}
	ds, err := admin.Drain(ctx, &pb.DrainRequest{Concurrency: 100000, TimeoutMs: -3})
	if err == nil {
		_, err = ds.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Drain with concurrency 100000: %v, want InvalidArgument", err)
	}
	if after := etcdState(t, c, ""); !equalState(before, after) {
		t.Fatalf("invalid admin RPCs changed etcd: %v", diffState(before, after))
	}
	if v, by := value(t, cl, "actor/counter/c7"); v != 9 || by != src {
		t.Fatalf("c7 = %d by %s, want 9 by %s (not sealed, not moved)", v, by, src)
	}
}
