package relocation

import (
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// ErrInvalidTransition: an event that the machine's phase cannot take.
var ErrInvalidTransition = errors.New("relocation: invalid transition")

// ErrProtocol: a peer sent a frame that breaks the protocol (wrong id, other
// bytes under the same identity, a gap).
var ErrProtocol = errors.New("relocation: protocol error")

func invalid(phase fmt.Stringer, ev Event) error {
	return fmt.Errorf("%w: %s in phase %s", ErrInvalidTransition, eventName(ev), phase)
}

// Outcome of a relocation; the first one recorded wins.
type Outcome int

// Outcomes.
const (
	// Completed: the target committed; it owns the object.
	Completed Outcome = 1 + iota
	// Aborted: the source kept the object (before READY, or its preserve won).
	Aborted
	// Failed: the relocation ended without either side keeping the object
	// alive as planned (the source lost its lease, the object was re-created),
	// or the target refused it.
	Failed
	// Shutdown: the node stopped before the relocation ended.
	Shutdown
)

func (o Outcome) String() string {
	switch o {
	case Completed:
		return "completed"
	case Aborted:
		return "aborted"
	case Failed:
		return "failed"
	case Shutdown:
		return "shutdown"
	}
	return "invalid"
}

// Event is an input to a machine: a peer frame, a tick, or the result of an
// action's I/O.
type Event interface{ event() }

// Action is an output of a machine, carried out by its driver.
type Action interface{ action() }

// Tick advances time. NowMs is wall-clock Unix milliseconds (the deadline
// travels on the wire as Unix ms); Draining says the node is shutting down.
type Tick struct {
	NowMs    int64
	Draining bool
}

// Received is a frame from the peer.
type Received struct{ Frame *pb.RelocationFrame }

// StreamBroken: the relocation stream ended.
type StreamBroken struct{ Err error }

// Stop: the node is stopping; the machine ends as soon as it safely can.
// Hard: the node is going away now (its etcd client closes): a machine
// waiting for etcd gives up too. A driver repeats Stop at every tick until
// the machine ended.
type Stop struct{ Hard bool }

func (Tick) event()         {}
func (Received) event()     {}
func (StreamBroken) event() {}
func (Stop) event()         {}

// Send a frame to the peer on the relocation stream.
type Send struct{ Frame *pb.RelocationFrame }

// Finish: the machine ended with an outcome (the metric records the first).
type Finish struct {
	Outcome Outcome
	Code    pb.Code
	Message string
}

func (Send) action()   {}
func (Finish) action() {}

func eventName(ev Event) string {
	switch e := ev.(type) {
	case Received:
		return fmt.Sprintf("Received(%s)", frameName(e.Frame))
	default:
		return fmt.Sprintf("%T", ev)
	}
}

func frameName(f *pb.RelocationFrame) string {
	switch f.GetFrame().(type) {
	case *pb.RelocationFrame_Prepare:
		return "PREPARE"
	case *pb.RelocationFrame_Chunk:
		return "STATE"
	case *pb.RelocationFrame_Ready:
		return "READY"
	case *pb.RelocationFrame_Failed:
		return "FAILED"
	case *pb.RelocationFrame_Data:
		return "DATA"
	case *pb.RelocationFrame_Cutover:
		return "CUTOVER"
	case *pb.RelocationFrame_Outcome:
		return "OUTCOME"
	case *pb.RelocationFrame_Precopied:
		return "PRECOPIED"
	case *pb.RelocationFrame_Sealed:
		return "SEALED"
	}
	return "EMPTY"
}

// TargetRef is the owner a relocation moves to.
type TargetRef struct {
	Owner record.OwnerRef
	Node  record.NodeRef
}

// WriteResult is the outcome of a guarded single-record write (intent,
// preserve), as the driver read it: written, or the current record.
type WriteResult struct {
	Written    bool
	Found      bool
	OwnerAlive bool
	Snapshot   record.Snapshot
	// Members: for a group, the other participants' records after the
	// write (Written), or as found.
	Members map[string]record.Snapshot
}
