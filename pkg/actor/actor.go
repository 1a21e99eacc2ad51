package actor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Object is one instance of a hosted type. The runtime calls it from one
// goroutine at a time (a FIFO mailbox): Handle, OnTimer, Snapshot and Restore
// never run concurrently for the same instance.
type Object interface {
	// Handle runs one request and returns its reply. The reply and the error
	// are terminal answers, recorded in the de-duplication table: a retry of
	// the same operation id gets them again and never runs Handle twice.
	// Errors map to codes: ErrUnknownMethod, ErrInvalidArgument, ErrRejected
	// (an application refusal); any other error is an internal error.
	Handle(ctx Context, method string, args [][]byte) ([]byte, error)
	// Snapshot returns the instance's whole state (relocation, durability).
	// The caller must not modify the returned bytes, and the instance must
	// not modify them afterwards either (replace, never mutate in place), so
	// a large state is handed over without a copy.
	Snapshot() ([]byte, error)
	// Restore replaces the state of a fresh instance with a snapshot. It
	// returns an error wrapping ErrCorruptState for bytes it cannot read, and
	// then the instance must not be used. Restore may keep state; the caller
	// must not modify it afterwards.
	Restore(state []byte) error
}

// TimerObject is implemented by types that use timers.
type TimerObject interface {
	// OnTimer is called for each delivered tick, in delivery-index order.
	OnTimer(ctx Context, tick Tick) error
}

// Tick is one delivered timer tick.
type Tick struct {
	Name string
	// Index is the delivery index: 1 for the first tick delivered, +1 for each
	// tick delivered after it, across relocations.
	Index uint64
	// Due is when the tick was scheduled. Under FireOnce it is the due time of
	// the oldest of the ticks it stands for.
	Due time.Time
	// Coalesced is how many scheduled ticks this delivery stands for: 1,
	// or more under the FireOnce policy when ticks were missed.
	Coalesced uint64
}

// Fence is the identity the instance is served under, to stamp side effects
// with (a receiver of a side effect refuses an older fence).
type Fence struct {
	OwnerID             string
	OwnerGeneration     int64
	ObjectGeneration    int64
	AuthorityGeneration int64
}

// Context is what a handler may use. It is valid only during the call.
type Context interface {
	Object() keyspace.Object
	Fence() Fence
	// Now is the runtime's clock.
	Now() time.Time
	// SetTimer creates or replaces a timer.
	SetTimer(spec TimerSpec) error
	// CancelTimer removes a timer; it reports whether it existed.
	CancelTimer(name string) bool
	// Push sends payload to the session that made this call (a client's
	// ordered, exactly-once stream to the object; ErrNoSession for a call
	// outside a session). Publish sends it to every session bound to the
	// object. Pushes are part of the call's effect: they leave once the
	// call is recorded (a call answered from the de-duplication table
	// pushes nothing again), each session gets them in order, once.
	Push(payload []byte) error
	Publish(payload []byte) error
	// Send records a message to the object named to (actor/<type>/<id>):
	// its method runs there with args, exactly once, after this turn
	// (docs/design.md §13). The message is part of the turn's effect: it
	// is recorded only if the handler returns no error, travels with the
	// object's state (and, for a durable type, is persisted with it) until
	// its destination answers, and is delivered in order with the other
	// messages of this object to the same destination. Send refuses with
	// ErrInvalidMessage (a bad destination, method or arguments) or
	// ErrOutboxFull (the object's outbox is at its bound).
	Send(to, method string, args ...[]byte) error
	// Ask is Send, and the destination's answer comes back, once, to the
	// object's OnReply (its type must implement ReplyObject).
	Ask(to, method string, args ...[]byte) error
	// Delete ends the object after this turn (docs/developing/lifecycle.md):
	// once the turn is recorded (for a durable type, persisted), one etcd
	// transaction removes the object's record, persisted state and
	// replies, and only then does the turn's reply leave. Queued requests
	// are answered UNAVAILABLE and retried; the next call to the name
	// creates a new object of a larger generation, and a caller that knew
	// this one is answered CODE_DELETED. Like Send it is part of the
	// turn's effect: nothing is deleted if the handler returns an error.
	// ErrNotDeletable: the object is a group's member (it must leave the
	// group first).
	Delete() error
	// SetReminder creates or replaces a durable reminder (ReminderSpec):
	// persisted with this turn, it fires OnReminder at each due time,
	// exactly once, wherever the object is, asleep or awake. Only a
	// durable type implementing ReminderObject has reminders
	// (ErrInvalidReminder); at most MaxReminders (ErrTooManyReminders).
	SetReminder(spec ReminderSpec) error
	// CancelReminder removes a reminder; it reports whether it existed.
	CancelReminder(name string) bool
}

// ErrNotDeletable: Context.Delete of an object that cannot be deleted (a
// group's member).
var ErrNotDeletable = wire.Sentinel(pb.Code_CODE_CONFLICT, "actor: the object cannot be deleted")

// ErrNoSession: Push in a call that came outside a session.
var ErrNoSession = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "actor: the call came outside a session")

// Type describes a type of object a node can host.
type Type struct {
	// Name is the <type> segment of actor/<type>/<id>.
	Name string
	// New returns a fresh instance with the initial state.
	New func() Object
	// Durable types persist every acknowledged change in etcd before the
	// reply (design.md §5a). Memory types (the default) keep state in memory.
	//
	// For a durable type the runtime calls Snapshot after every request and
	// timer fire; when the bytes (or the timers) changed it writes them, with
	// the replies of the persisted changes, to state/<object> in one etcd
	// transaction fenced by the authority record, before the reply leaves.
	// A crash of the owner then loses no acknowledged change: the object is
	// re-activated elsewhere from that state (no CODE_STATE_LOST), and a
	// retry is answered from the persisted replies. The persisted value is
	// bounded by the node's --durable-max-bytes (within etcd's request
	// size): a change over it is refused with CODE_STATE_TOO_LARGE and
	// rolled back. Snapshot should therefore be cheap and canonical (equal
	// states give equal bytes), or every read-only request costs a write.
	Durable bool
	// MaxStateBytes bounds a snapshot (0: the runtime default).
	MaxStateBytes int
	// SleepAfter is how long an object of this type may stay idle before
	// its node puts it to sleep (docs/developing/lifecycle.md): 0 takes the node's
	// default (meshnode --sleep-after, itself 0 = never), a negative value
	// never sleeps. A sleeping object holds no memory on any node and its
	// record names no owner; the next call wakes it where placement
	// chooses. A durable type wakes from its persisted state, timers and
	// replies: nothing is lost. A memory type sleeps only if it sets
	// SleepDropsState as well.
	SleepAfter time.Duration
	// SleepDropsState lets a memory type sleep, knowing what a sleep
	// drops: its state, timers and de-duplication table. The next call
	// starts it from New under the same object generation — a reset the
	// type chose, not CODE_STATE_LOST (which still reports a state lost
	// with a crashed owner). A retry of a request answered before the
	// sleep runs again. Ignored for durable types, which lose nothing.
	SleepDropsState bool
	// Methods lists the methods Handle accepts. When set, a call of any
	// other method is refused with CODE_UNKNOWN_METHOD before anything
	// else happens: no object is activated and no record is written in
	// etcd for it (without the list, the first call of an unknown method
	// on a new object activates it, then Handle refuses the method).
	Methods []string
}

// Sleeps reports whether objects of t may sleep at all: a durable type,
// or a memory type that accepts losing its state to a sleep.
func (t Type) Sleeps() bool { return t.SleepAfter >= 0 && (t.Durable || t.SleepDropsState) }

// HasMethod reports whether a call of method may reach Handle: it is
// listed in Methods, or Methods is empty.
func (t Type) HasMethod(method string) bool {
	return len(t.Methods) == 0 || slices.Contains(t.Methods, method) || method == ReminderMethod
}

// Errors a handler returns; the runtime maps them to codes.
var (
	// ErrUnknownMethod: the type has no such method.
	ErrUnknownMethod = wire.Sentinel(pb.Code_CODE_UNKNOWN_METHOD, "actor: unknown method")
	// ErrInvalidArgument: the arguments are malformed.
	ErrInvalidArgument = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "actor: invalid argument")
	// ErrRejected: the handler refused the request (e.g. insufficient funds).
	ErrRejected = wire.Sentinel(pb.Code_CODE_APPLICATION_ERROR, "actor: rejected")
	// ErrUnknownType: no registered type has the name.
	ErrUnknownType = wire.Sentinel(pb.Code_CODE_UNKNOWN_TYPE, "actor: unknown type")
	// ErrDuplicateType: a type of that name is already registered.
	ErrDuplicateType = errors.New("actor: type already registered")
	// ErrPanicked: the object's code panicked (a handler, a timer, an
	// answer, its snapshot or restore). The node answers that call with it
	// and goes on serving every other object.
	ErrPanicked = wire.Sentinel(pb.Code_CODE_INTERNAL, "actor: the object's code panicked")
	// ErrStateTooLarge: a snapshot is over the type's limit, or a durable
	// object's persisted state would be over the node's bound.
	ErrStateTooLarge = wire.Sentinel(pb.Code_CODE_STATE_TOO_LARGE, "actor: state too large")
)

// InvalidArgument wraps ErrInvalidArgument with a message.
func InvalidArgument(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// Rejected wraps ErrRejected with a message.
func Rejected(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRejected, fmt.Sprintf(format, args...))
}

// UnknownMethod wraps ErrUnknownMethod with the method name.
func UnknownMethod(typ, method string) error {
	return fmt.Errorf("%w: %s has no method %q", ErrUnknownMethod, typ, method)
}

// UnknownMethodOf is UnknownMethod naming the methods t lists, when it
// lists them: what the caller may call instead.
func UnknownMethodOf(t Type, method string) error {
	if len(t.Methods) == 0 {
		return UnknownMethod(t.Name, method)
	}
	return fmt.Errorf("%w: %s has no method %q (its methods: %s)", ErrUnknownMethod, t.Name, method, strings.Join(t.Methods, ", "))
}

// Registry holds the types a node hosts. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	types map[string]Type
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{types: map[string]Type{}} }

// Register adds a type.
func (r *Registry) Register(t Type) error {
	if err := (keyspace.Actor(t.Name, "x")).Validate(); err != nil {
		return fmt.Errorf("actor: type name: %w", err)
	}
	if t.New == nil {
		return fmt.Errorf("actor: type %q has no constructor", t.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.types[t.Name]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateType, t.Name)
	}
	r.types[t.Name] = t
	return nil
}

// Lookup returns the type of that name.
func (r *Registry) Lookup(name string) (Type, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.types[name]
	if !ok {
		names := make([]string, 0, len(r.types))
		for n := range r.types {
			names = append(names, n)
		}
		slices.Sort(names)
		return Type{}, fmt.Errorf("%w: %q (this registry's types: %s)", ErrUnknownType, name, strings.Join(names, ", "))
	}
	return t, nil
}

// Names lists the registered type names (unordered).
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.types))
	for n := range r.types {
		out = append(out, n)
	}
	return out
}
