// Package reloclog owns what a node tells of its relocations: the status
// of each relocation in flight and of the last that ended
// (ListRelocations), the relocator's Reporter that keeps those statuses,
// the node's relocation metrics and its log, and the hub of the
// WatchEvents stream that publishes them as they start and end.
package reloclog

import (
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Record is the status of one relocation on this node (either
// role), as ListRelocations shows it.
type Record struct {
	mu sync.Mutex
	st *pb.RelocationStatus
}

// Set changes the status under the record's lock.
func (r *Record) Set(f func(*pb.RelocationStatus)) {
	r.mu.Lock()
	f(r.st)
	r.mu.Unlock()
}

// ID is the relocation's id.
func (r *Record) ID() wire.RelocationID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var id wire.RelocationID
	copy(id[:], r.st.RelocationId)
	return id
}

// Snapshot is a copy of the status now.
func (r *Record) Snapshot() *pb.RelocationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return proto.Clone(r.st).(*pb.RelocationStatus)
}

// Log is the node's relocations, in flight (by id and role)
// and the last 256 that ended.
type Log struct {
	mu     sync.Mutex
	active map[string]*Record
	recent []*pb.RelocationStatus
	// ended is called after a relocation ended (a drain waits for target
	// stages to end).
	ended func()
	// hub hears each relocation start and end (WatchEvents).
	hub *Hub
}

// NewLog is an empty log whose relocations hub hears start and end;
// ended is called after each ended (a drain waits for target stages to
// end).
func NewLog(hub *Hub, ended func()) *Log {
	return &Log{active: map[string]*Record{}, hub: hub, ended: ended}
}

// Track lists st as in flight.
func (l *Log) Track(st *pb.RelocationStatus) *Record {
	rec := &Record{st: st}
	l.mu.Lock()
	l.active[string(st.RelocationId)+st.Role] = rec
	l.mu.Unlock()
	if l.hub != nil {
		l.hub.PublishRelocation(rec.Snapshot)
	}
	return rec
}

// Untrack moves rec to the recently ended.
func (l *Log) Untrack(rec *Record) {
	st := rec.Snapshot()
	l.mu.Lock()
	delete(l.active, string(st.RelocationId)+st.Role)
	l.recent = append(l.recent, st)
	if len(l.recent) > 256 {
		l.recent = l.recent[len(l.recent)-256:]
	}
	l.mu.Unlock()
	if l.hub != nil {
		l.hub.PublishRelocation(func() *pb.RelocationStatus { return proto.Clone(st).(*pb.RelocationStatus) })
	}
	l.ended()
}

// List is every relocation in flight, then the recent ended ones.
func (l *Log) List() []*pb.RelocationStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*pb.RelocationStatus, 0, len(l.active)+len(l.recent))
	for _, r := range l.active {
		out = append(out, r.Snapshot())
	}
	for _, st := range l.recent {
		out = append(out, proto.Clone(st).(*pb.RelocationStatus))
	}
	return out
}

// InFlight counts the relocations in flight in role.
func (l *Log) InFlight(role string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := 0
	for key := range l.active {
		if strings.HasSuffix(key, role) {
			k++
		}
	}
	return k
}
