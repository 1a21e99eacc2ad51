package durablebench

import (
	"context"
	"fmt"
	"strconv"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/statestore"
	pgstore "github.com/meshloc/meshloc/pkg/statestore/postgres"
)

// seam drives the PostgreSQL store from this process, through the same
// code a node runs (postgres.Store), on the server the node uses: the
// store's own share of a write and of a wake, without the call's path and
// etcd's authority transaction around them.
type seam struct {
	s       *pgstore.Store
	owner   authority.OwnerRef
	objects []*seamObject
	claims  int64 // the authority generation of the next round of claims
}

// seamObject is one object the seam writes, as its owner tracks it.
type seamObject struct {
	obj     keyspace.Object
	fence   authority.Fence
	version int64  // the state version its last claim or write left
	seq     uint64 // its last write's sequence number
	replies []string
}

func openSeam(ctx context.Context, env Env, dsn string) (*seam, error) {
	s, err := pgstore.Open(ctx, dsn, authority.New(env.Etcd, keyspace.Default()))
	if err != nil {
		return nil, fmt.Errorf("bench: durable: the store from this process: %w", err)
	}
	return &seam{s: s, owner: authority.OwnerRef{ID: "bench", Generation: 1}, claims: 1}, nil
}

// claimFresh claims n objects named prefix0… as just activated.
func (m *seam) claimFresh(ctx context.Context, prefix string, n int) error {
	m.objects = m.objects[:0]
	for i := range n {
		o := &seamObject{obj: keyspace.Actor("dcounter", prefix+strconv.Itoa(i)),
			fence: authority.Fence{Owner: m.owner, ObjectGeneration: 1, AuthorityGeneration: 1}}
		rd, err := m.s.Load(ctx, statestore.Claim{Object: o.obj, Fence: o.fence, Fresh: true})
		if err != nil {
			return fmt.Errorf("bench: durable: claim %s: %w", o.obj, err)
		}
		o.version = rd.StateVersion
		m.objects = append(m.objects, o)
	}
	return nil
}

// write persists the next change of the i-th object (in turn), as a
// dcounter's add does: its state, and the add's reply, keeping the last
// 16 replies (older ones evicted by the write).
func (m *seam) write(ctx context.Context, i int, state []byte) error {
	o := m.objects[i%len(m.objects)]
	o.seq++
	v := authority.StateValue{V: authority.StateVersion1, Object: o.obj.String(), ObjectGeneration: o.fence.ObjectGeneration,
		AuthorityGeneration: o.fence.AuthorityGeneration, Owner: o.fence.Owner, Seq: o.seq, State: state,
		ReplyWindowMs: 600_000, ReplyMaxEntries: 16}
	id := fmt.Sprintf("%016x%016x", o.seq, i) // sorts as the writes came, as operation ids do
	o.replies = append(o.replies, id)
	if len(o.replies) > 16 {
		o.replies = o.replies[1:]
	}
	req := authority.PersistRequest{Object: o.obj, Fence: o.fence, StoreVersion: 1, StateVersion: o.version, State: &v, Value: v.Encode(), // as a node sends it
		Reply:           &authority.StateReply{ID: id, Value: authority.ReplyValue{Payload: []byte(`{"value":` + strconv.FormatUint(o.seq, 10) + `}`)}},
		KeepRepliesFrom: o.replies[0]}
	res, err := m.s.Persist(ctx, req)
	switch {
	case err != nil:
		return fmt.Errorf("bench: durable: the store's write of %s: %w", o.obj, err)
	case res.Outcome != authority.PersistWritten:
		return fmt.Errorf("bench: durable: the store's write of %s: %s", o.obj, res.Outcome)
	}
	o.version = res.StateVersion
	return nil
}

// load claims the i-th object (in turn) under a new fence, as a wake on
// another node would, and reads its state, which must be want bytes.
func (m *seam) load(ctx context.Context, i int, want int) error {
	if i%len(m.objects) == 0 {
		m.claims++
	}
	o := m.objects[i%len(m.objects)]
	o.fence.AuthorityGeneration = m.claims
	rd, err := m.s.Load(ctx, statestore.Claim{Object: o.obj, Fence: o.fence})
	switch {
	case err != nil:
		return fmt.Errorf("bench: durable: the store's claim of %s: %w", o.obj, err)
	case len(rd.Value.State) != want:
		return fmt.Errorf("bench: durable: the store's claim of %s read %d bytes, want %d", o.obj, len(rd.Value.State), want)
	}
	o.version = rd.StateVersion
	return nil
}

func (m *seam) close() { _ = m.s.Close() }
