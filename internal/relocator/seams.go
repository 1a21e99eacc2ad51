package relocator

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Store is the etcd side of a relocation (pkg/authority's *Store).
type Store interface {
	Intend(ctx context.Context, req authority.IntentRequest) (authority.WriteResult, error)
	Preserve(ctx context.Context, req authority.PreserveRequest) (authority.WriteResult, error)
	Commit(ctx context.Context, req authority.CommitRequest) (authority.CommitResult, error)
	ResolveCommit(ctx context.Context, req authority.CommitRequest) (authority.CommitResult, error)
	Read(ctx context.Context, obj keyspace.Object) (authority.Snapshot, error)
	ReadMany(ctx context.Context, objs []keyspace.Object, owners []string) (authority.View, error)
}

// Lister lists a bulk run in etcd (pkg/authority's *Store).
type Lister interface {
	ListBulk(ctx context.Context, id string, l authority.BulkListing, lease clientv3.LeaseID) error
	UnlistBulk(ctx context.Context, id string, source authority.OwnerRef) error
}

// Peer is one relocation stream: frames in order, both ways.
type Peer interface {
	Send(f *pb.RelocationFrame) error
	// Recv blocks for the next frame; an error ends the stream.
	Recv() (*pb.RelocationFrame, error)
	// Close ends the stream from this side: a Recv blocked on it returns
	// (a gRPC server stream ends when its handler returns instead).
	Close()
}

// Recycler is what a Peer may implement whose received chunks sit in
// buffers it can reuse: Recycle gives back one chunk's data, which the
// relocation no longer reads (relocation.Recycle). A Peer without it
// leaves the buffers to the garbage collector.
type Recycler interface {
	Recycle(data []byte)
}

// SourceMailbox is what a source relocation moves (one object, or a
// group's members), as its node hosts it. Where a new request goes follows
// from the calls alone: served until Seal, kept from Seal, held from
// Boundary, served again from Reopen, redirected from Drop, failed from
// Fail.
type SourceMailbox interface {
	// Seal stops dispatch (the handler in progress finishes; new requests
	// are kept, in order), captures state, timers, queued requests and
	// de-duplication table, and returns the payload (its segments).
	Seal(ctx context.Context, a relocation.Seal) ([][]byte, error)
	// Snapshot captures the payload as Seal would, while the object
	// serves: between two of its handlers, nothing sealed or kept (a
	// pre-copy's base).
	Snapshot(ctx context.Context, a relocation.Snapshot) ([][]byte, error)
	// Boundary holds new requests from now on and returns those kept since
	// the seal, as DATA requests, in order.
	Boundary() []*pb.CallRequest
	Reopen(a relocation.Reopen)
	Drop(a relocation.Drop)
	Fail(code pb.Code, msg string)
}

// TargetMailbox is what a target stage restores, and admits or discards.
type TargetMailbox interface {
	// Restore decodes the payload and creates hidden instances (a
	// *relocation.RefusedError refuses the stage for a reason of the
	// node's).
	Restore(payload []byte) error
	Admit(a relocation.Admit)
	Discard()
}

// Watch is the node's location cache: the changes of the primary's record
// reach the source machine as Observed (*authority.Cache fits).
type Watch interface {
	// Changed is closed at the cache's next change.
	Changed() <-chan struct{}
	Lookup(obj keyspace.Object) (record.Location, bool)
	// LookupName is Lookup by the object's name (a bulk run looks its
	// units up at every change: no name built each time).
	LookupName(name string) (record.Location, bool)
}

// Reporter hears what a run does (status, metrics, logs). It is called on
// the run's goroutine.
type Reporter interface {
	Phase(phase string)
	// Sealed: the source sealed and captured payloadBytes at at.
	Sealed(at time.Time, payloadBytes int)
	// Chunk: the source sent a STATE chunk of n bytes.
	Chunk(n int)
	// Admitted: the interruption ends (the source: the target's OK
	// OUTCOME or the commit seen; the target: its admission).
	Admitted(at time.Time)
	Finished(f relocation.Finish)
	// Failed: a step the machine refused (a protocol error of the peer).
	Failed(err error)
}

// Timeline, when a Reporter implements it too, hears the steps of the
// relocation's timeline as the driver enters them, at the actions and
// results that begin them (status only: nothing decides on it). A step
// lasts until the next begins; "done" ends the last. Source: intent,
// precopy, seal, state, ready (waiting for READY), cutover (DATA and
// CUTOVER sent), commit (waiting for the target's commit), preserve,
// settle, done. Target: state (PREPARE to the payload whole), ready (the
// restore), cutover (READY sent, waiting for CUTOVER), commit, admission,
// settle, done.
type Timeline interface {
	Enter(step string, at time.Time)
}

// enter tells r's Timeline, if it has one, that step began now.
func enter(r Reporter, c interface{ Now() time.Time }, step string) {
	if tl, ok := r.(Timeline); ok {
		tl.Enter(step, c.Now())
	}
}
