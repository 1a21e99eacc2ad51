package relocator

import (
	"context"
	"errors"
	"time"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/relocation"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A bulk target's reads of the keys its PREPAREs name (the one-write
// rule: bulk_intent.go). Each key is read once per stream. While a read is
// in flight, every frame for a relocation the run does not know yet is
// held, in order (its PREPARE may be one of those waiting for the key),
// and goes on once every read ended.

// Bounds on what one stream makes a target read and hold: a peer's PREPAREs
// name its bulk ids, and a source needs a few keys a stream.
const (
	maxBulkKeys   = 64
	maxHeldFrames = 1 << 14
)

// errTooManyBulks: a stream named more bulks than a target reads for it.
var errTooManyBulks = errors.New("relocator: the bulk's key was not read (too many bulks on one stream, or no reader)")

// bulkReads is a bulk target's keys, read or being read, and the frames
// held meanwhile.
type bulkReads struct {
	keys    map[string]*relocation.BulkKey
	reading map[string]bool
	held    []*pb.RelocationFrame
}

// hold takes f, a frame for no stage of the run: it starts the read of
// the key a PREPARE names if no read of it was made, and holds f while
// any read is in flight (true). A frame beyond maxHeldFrames goes on at
// once (Late, or a PREPARE refused for want of its key).
func (r *bulkReads) hold(ctx context.Context, l *multi, intents BulkIntents, f *pb.RelocationFrame, timeout time.Duration) bool {
	if id := f.GetPrepare().GetBulkId(); id != "" && intents != nil && r.keys[id] == nil && !r.reading[id] &&
		keyspace.ValidateOwnerID(id) == nil && len(r.keys)+len(r.reading) < maxBulkKeys {
		if r.reading == nil {
			r.reading, r.keys = map[string]bool{}, map[string]*relocation.BulkKey{}
		}
		r.reading[id] = true
		if timeout <= 0 {
			timeout = DefaultOpTimeout
		}
		l.async.Add(1)
		go func() {
			defer l.async.Done()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			b, rev, found, err := intents.ReadBulkIntent(rctx, id)
			l.queue.push(tagged{bulk: &relocation.BulkKey{ID: id, Intent: b, Revision: rev, Found: found, Err: err}})
		}()
	}
	if len(r.reading) == 0 || len(r.held) >= maxHeldFrames {
		return false
	}
	r.held = append(r.held, f)
	return true
}

// got takes a read's result.
func (r *bulkReads) got(k *relocation.BulkKey) {
	delete(r.reading, k.ID)
	r.keys[k.ID] = k
}

// key is what a PREPARE naming bulk id is checked against (nil: it names
// none, or an id no key can have: the machine refuses it).
func (r *bulkReads) key(id string) *relocation.BulkKey {
	switch {
	case id == "" || keyspace.ValidateOwnerID(id) != nil:
		return nil
	case r.keys[id] != nil:
		return r.keys[id]
	}
	return &relocation.BulkKey{ID: id, Err: errTooManyBulks}
}

// routeHeld routes a held frame once the reads ended: as any other, or
// as late once the stream ended (no stage starts then).
func (b *BulkTarget) routeHeld(ctx context.Context, l *multi, stages map[*unit]*BulkStage, out Peer, send func(*pb.RelocationFrame), f *pb.RelocationFrame, now time.Time, ended bool) {
	if ended {
		if b.Late != nil {
			b.Late(f)
		}
		return
	}
	b.frame(ctx, l, stages, out, send, f, now)
}
