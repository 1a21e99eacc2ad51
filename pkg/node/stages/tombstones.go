package stages

import (
	"sync"

	"google.golang.org/protobuf/proto"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Tombstones remember finished target stages (bounded), so a late or repeated
// PREPARE gets the same answer and late frames are ignored, never re-applied.
// They are keyed by stage (relocation id and nonce): a stranger's PREPARE
// under a published id leaves no tombstone the real one would meet. A
// tombstone holds its answer frame and a fingerprint, never anything the
// stage received.
type Tombstones struct {
	mu    sync.Mutex
	by    map[Key]tombstone
	order []Key
	max   int
}

type tombstone struct {
	fp     [32]byte
	answer *pb.RelocationFrame
}

// NewTombstones keeps the last max.
func NewTombstones(max int) *Tombstones {
	return &Tombstones{by: map[Key]tombstone{}, max: max}
}

// Remember keeps the ended stage id: its PREPARE's fingerprint fp and
// its answer (nil: it ended without one).
func (t *Tombstones) Remember(id Key, fp [32]byte, ans *pb.RelocationFrame) {
	if ans != nil {
		ans = proto.CloneOf(ans) // its own bytes, whatever the machine's frame shares
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.by[id]; !ok {
		t.order = append(t.order, id)
	}
	t.by[id] = tombstone{fp: fp, answer: ans}
	for len(t.order) > t.max {
		delete(t.by, t.order[0])
		t.order = t.order[1:]
	}
}

// Answer is the answer to a PREPARE of a stage that ended: its own, or a
// refusal when the PREPARE's bytes differ; ok false when none ended.
func (t *Tombstones) Answer(key Key, fp [32]byte) (*pb.RelocationFrame, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts, ok := t.by[key]
	id := key.id
	if !ok {
		return nil, false
	}
	if ts.fp != fp {
		return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: id[:], Code: pb.Code_CODE_PROTOCOL_ERROR, Message: "PREPARE repeated with other bytes"}}}, true
	}
	if ts.answer == nil {
		return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: id[:], Code: pb.Code_CODE_ALREADY_TERMINAL, Message: "relocation already ended"}}}, true
	}
	return ts.answer, true
}
