package actor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Errors of the reply table.
var (
	// ErrOperationExpired: the operation id is older than the de-duplication
	// window, or no newer than an entry the table has already evicted. The
	// request must not run: it may have run already and its reply be gone.
	ErrOperationExpired = wire.Sentinel(pb.Code_CODE_OPERATION_EXPIRED, "actor: operation expired")
	// ErrInvalidOperation: the operation id is zero, not a UUIDv7, or made
	// further in the future than the window (a clock far ahead).
	ErrInvalidOperation = wire.Sentinel(pb.Code_CODE_INVALID_OPERATION_ID, "actor: invalid operation id")
)

// Defaults and limits of the reply table.
const (
	// DefaultReplyWindow is how long a caller may retry (docs/design.md §5).
	DefaultReplyWindow = 60 * time.Second
	// DefaultReplyEntries bounds the entries of one object's table.
	DefaultReplyEntries = 4096
	// MaxReplyWindow and MaxReplyEntries bound the configuration, and what
	// DecodeReplyTable accepts.
	MaxReplyWindow  = 24 * time.Hour
	MaxReplyEntries = 1 << 20
)

// Reply is the terminal answer of one operation, as recorded for retries.
type Reply struct {
	// Code is a pb.Code value: CODE_OK, or the code of a terminal error.
	Code int32
	// Payload is the handler's reply (nil when empty).
	Payload []byte
	// Message is the error text of a non-OK reply.
	Message string
}

// CodeOf maps a handler error to its wire code: nil → OK, ErrUnknownMethod,
// ErrInvalidArgument, ErrRejected (an application error),
// ErrOperationExpired, ErrInvalidOperation, ErrStateTooLarge
// (CODE_STATE_TOO_LARGE), ErrInvalidMessage (CODE_INVALID_ARGUMENT),
// ErrOutboxFull (CODE_RESOURCE_EXHAUSTED); any other error is internal.
func CodeOf(err error) pb.Code {
	switch {
	case err == nil:
		return pb.Code_CODE_OK
	case errors.Is(err, ErrUnknownMethod):
		return pb.Code_CODE_UNKNOWN_METHOD
	case errors.Is(err, ErrInvalidArgument):
		return pb.Code_CODE_INVALID_ARGUMENT
	case errors.Is(err, ErrRejected):
		return pb.Code_CODE_APPLICATION_ERROR
	case errors.Is(err, ErrUnknownType):
		return pb.Code_CODE_UNKNOWN_TYPE
	case errors.Is(err, ErrOperationExpired):
		return pb.Code_CODE_OPERATION_EXPIRED
	case errors.Is(err, ErrInvalidOperation):
		return pb.Code_CODE_INVALID_OPERATION_ID
	case errors.Is(err, ErrStateTooLarge):
		return pb.Code_CODE_STATE_TOO_LARGE
	case errors.Is(err, ErrInvalidMessage):
		return pb.Code_CODE_INVALID_ARGUMENT
	case errors.Is(err, ErrOutboxFull):
		return pb.Code_CODE_RESOURCE_EXHAUSTED
	case errors.Is(err, ErrNotDeletable):
		return pb.Code_CODE_CONFLICT
	}
	return pb.Code_CODE_INTERNAL
}

// ReplyOf is the Reply to record for a handler's result.
func ReplyOf(payload []byte, err error) Reply {
	if err != nil {
		return Reply{Code: int32(CodeOf(err)), Message: err.Error()}
	}
	return Reply{Code: int32(pb.Code_CODE_OK), Payload: bytes.Clone(payload)}
}

// ReplyTable is an object's table of recent operation ids and their replies
// (docs/design.md §5). It is part of the object's state: it travels with it
// across relocations (Encode), so a retry is answered from it and never
// executed twice, on whichever node the object lives.
//
// It is bounded twice: an entry lives while a caller may retry (the window),
// and there are at most maxEntries. An id is refused as expired when the
// window says it is too old, or when it is no newer than the low watermark,
// the newest id time ever evicted. Together they make the table safe to
// truncate: an id that could have been evicted is never executed again, even
// if the object moves to a node whose clock is behind.
//
// Times are the UUIDv7 timestamps of the ids, in milliseconds, against the
// now the runtime passes in. Not safe for concurrent use.
type ReplyTable struct {
	window     time.Duration
	maxEntries int
	watermark  int64 // Unix ms; 0: nothing evicted yet
	// slots sorted by id bytes, so by time (UUIDv7): a lookup is a binary
	// search, a new id almost always an append, eviction a cut at the
	// front, and encoding a walk, with no map to build when a table
	// arrives with its object. A slot holds no pointer (its payload and
	// message are in arena), so a table of thousands of replies is one
	// block the garbage collector never scans, built with no write
	// barriers when it arrives with its object.
	//
	// They are behind a pointer, nil while the table is empty: most objects
	// are idle, and an idle object's table is its bounds and watermark
	// alone (32 bytes, not 80).
	*replyData
}

// replyData is a non-empty table's entries.
type replyData struct {
	slots []replySlot
	arena []byte
	live  int // bytes of arena that slots refer to; the rest is evicted
}

// entries returns t's entries, made on first use.
func (t *ReplyTable) entries() *replyData {
	if t.replyData == nil {
		t.replyData = &replyData{}
	}
	return t.replyData
}

// replySlot is one entry: its reply's payload is arena[off:off+plen], its
// message the mlen bytes after it.
type replySlot struct {
	id   wire.OperationID
	off  int
	plen uint32
	mlen uint32
	code int32
}

func (s replySlot) size() int { return int(s.plen) + int(s.mlen) }

// reply is slot i's Reply, its payload a copy (nil when empty).
func (t *ReplyTable) reply(i int) Reply {
	s := t.slots[i]
	r := Reply{Code: s.code}
	if s.plen > 0 {
		r.Payload = bytes.Clone(t.arena[s.off : s.off+int(s.plen)])
	}
	if s.mlen > 0 {
		r.Message = string(t.arena[s.off+int(s.plen) : s.off+s.size()])
	}
	return r
}

// appendSlot adds an entry after the last one (the caller keeps the order).
func (t *ReplyTable) appendSlot(id wire.OperationID, code int32, payload []byte, msg string) {
	d := t.entries()
	d.slots = append(d.slots, t.newSlot(id, code, payload, msg))
}

func (t *ReplyTable) newSlot(id wire.OperationID, code int32, payload []byte, msg string) replySlot {
	d := t.entries()
	s := replySlot{id: id, off: len(d.arena), plen: uint32(len(payload)), mlen: uint32(len(msg)), code: code}
	d.arena = append(append(d.arena, payload...), msg...)
	d.live += s.size()
	return s
}

// NewReplyTable returns an empty table. window ≤ 0 means DefaultReplyWindow,
// maxEntries ≤ 0 means DefaultReplyEntries; larger values than the maxima
// are clamped, and a window is rounded up to a whole millisecond.
func NewReplyTable(window time.Duration, maxEntries int) *ReplyTable {
	if window <= 0 {
		window = DefaultReplyWindow
	}
	window = min(window, MaxReplyWindow)
	if r := window % time.Millisecond; r != 0 {
		window += time.Millisecond - r
	}
	if maxEntries <= 0 {
		maxEntries = DefaultReplyEntries
	}
	maxEntries = min(maxEntries, MaxReplyEntries)
	return &ReplyTable{window: window, maxEntries: maxEntries}
}

// find is the index of id in the entries, or where it would go.
func (t *ReplyTable) find(id wire.OperationID) (int, bool) {
	if t.replyData == nil {
		return 0, false
	}
	return slices.BinarySearchFunc(t.slots, id, func(s replySlot, id wire.OperationID) int { return compareIDs(s.id, id) })
}

// Window is the retry window.
func (t *ReplyTable) Window() time.Duration { return t.window }

// MaxEntries is the entry bound.
func (t *ReplyTable) MaxEntries() int { return t.maxEntries }

// Watermark is the newest id time evicted so far (zero time if none).
func (t *ReplyTable) Watermark() time.Time {
	if t.watermark == 0 {
		return time.Time{}
	}
	return msTime(t.watermark)
}

// Len is the number of entries.
func (t *ReplyTable) Len() int {
	if t.replyData == nil {
		return 0
	}
	return len(t.slots)
}

func idMs(id wire.OperationID) int64 {
	// UUIDv7: the first 48 bits are the Unix time in milliseconds.
	return int64(id[0])<<40 | int64(id[1])<<32 | int64(id[2])<<24 | int64(id[3])<<16 | int64(id[4])<<8 | int64(id[5])
}

// Check is called before executing an operation. It returns the recorded
// reply and true if the id ran before; false and nil if it may run now;
// ErrOperationExpired if it is too old to tell (never run it); or
// ErrInvalidOperation for an id that is not a UUIDv7 or is from further in
// the future than the window.
func (t *ReplyTable) Check(id wire.OperationID, now time.Time) (Reply, bool, error) {
	if _, err := wire.ParseOperationIDBytes(id[:]); err != nil {
		return Reply{}, false, fmt.Errorf("%w: %v", ErrInvalidOperation, err)
	}
	if i, ok := t.find(id); ok {
		return t.reply(i), true, nil
	}
	if err := CheckOperationTime(id, now, t.window); err != nil {
		return Reply{}, false, err
	}
	switch at := idMs(id); {
	case at <= t.watermark:
		return Reply{}, false, fmt.Errorf("%w: operation %s made at %s, not after the table's low watermark %s",
			ErrOperationExpired, id, msTime(at).Format(time.RFC3339Nano), msTime(t.watermark).Format(time.RFC3339Nano))
	}
	return Reply{}, false, nil
}

// CheckOperationTime is the time rule of Check, which needs no table: an
// operation id made more than window after now is ErrInvalidOperation (a
// clock far ahead, or a forgery), one made more than window before now is
// ErrOperationExpired (its table entry may be gone: it is never run). A
// node applies it before it routes or activates anything, so a request
// that every owner would refuse writes nothing anywhere.
func CheckOperationTime(id wire.OperationID, now time.Time, window time.Duration) error {
	at, nowMs, win := idMs(id), now.UnixMilli(), window.Milliseconds()
	switch {
	case at > nowMs+win:
		return fmt.Errorf("%w: operation %s made at %s, more than %s after now (%s)",
			ErrInvalidOperation, id, msTime(at).Format(time.RFC3339Nano), window, now.UTC().Format(time.RFC3339Nano))
	case at < nowMs-win:
		return fmt.Errorf("%w: operation %s made at %s, older than the %s window",
			ErrOperationExpired, id, msTime(at).Format(time.RFC3339Nano), window)
	}
	return nil
}

// Record stores the reply of an operation that ran (the caller has called
// Check first), then evicts the entries older than the window and, while
// over maxEntries, the oldest ones, raising the watermark. Recording an id
// twice keeps the first reply.
func (t *ReplyTable) Record(id wire.OperationID, r Reply, now time.Time) {
	if i, ok := t.find(id); !ok {
		d := t.entries()
		d.slots = slices.Insert(d.slots, i, t.newSlot(id, r.Code, r.Payload, r.Message))
	}
	t.evict(now)
}

// evict drops the replies older than the window at now, and the oldest
// beyond maxEntries.
func (t *ReplyTable) evict(now time.Time) {
	if t.replyData == nil {
		return
	}
	cutoff := now.UnixMilli() - t.window.Milliseconds()
	n := 0
	for n < len(t.slots) && (idMs(t.slots[n].id) < cutoff || len(t.slots)-n > t.maxEntries) {
		t.watermark = max(t.watermark, idMs(t.slots[n].id))
		t.live -= t.slots[n].size()
		n++
	}
	// Reslicing drops the front in O(1); append copies to a new array when
	// the capacity runs out, which releases the evicted prefix. The arena
	// is compacted once more of it is evicted than live, so it stays
	// within about twice what the table holds, at O(1) amortized per reply.
	t.slots = t.slots[n:]
	if dead := len(t.arena) - t.live; dead > t.live && dead >= 4096 {
		t.compact()
	}
}

// compact copies the live payloads and messages into a new arena.
func (t *ReplyTable) compact() {
	arena := make([]byte, 0, t.live+t.live/2)
	for i, s := range t.slots {
		t.slots[i].off = len(arena)
		arena = append(arena, t.arena[s.off:s.off+s.size()]...)
	}
	t.arena = arena
}

// Prune drops the replies older than the window at now, as Record does,
// and once none is left releases the table's memory: an object that is
// called no more holds nothing after its window (a million idle objects
// would otherwise each keep the map of their last calls).
func (t *ReplyTable) Prune(now time.Time) {
	t.evict(now)
	if t.Len() == 0 {
		t.replyData = nil
	}
}

func compareIDs(a, b wire.OperationID) int { return bytes.Compare(a[:], b[:]) }

// Encoding of a ReplyTable, version 1 (the canonical form is the only one
// DecodeReplyTable accepts):
//
//	'R' 0x01 uvarint(window ms) uvarint(max entries) varint(watermark ms) uvarint(count)
//	per entry, sorted by id:
//	  id[16] varint(code) uvarint(len) payload uvarint(len) message
const (
	replyMagic   = 'R'
	replyVersion = 1
	// minReplyEntry is the smallest encoded entry: id, code, two lengths.
	minReplyEntry = wire.IDLen + 3
)

// Encode returns the canonical bytes of the table: equal tables give equal bytes.
func (t *ReplyTable) Encode() []byte {
	d := t.replyData
	if d == nil {
		d = &replyData{}
	}
	b := make([]byte, 0, 32+len(d.slots)*(minReplyEntry+2*binary.MaxVarintLen32)+d.live)
	b = append(b, replyMagic, replyVersion)
	b = binary.AppendUvarint(b, uint64(t.window.Milliseconds()))
	b = binary.AppendUvarint(b, uint64(t.maxEntries))
	b = binary.AppendVarint(b, t.watermark)
	b = binary.AppendUvarint(b, uint64(len(d.slots)))
	for _, s := range d.slots {
		b = append(b, s.id[:]...)
		b = binary.AppendVarint(b, int64(s.code))
		b = binary.AppendUvarint(b, uint64(s.plen))
		b = append(b, d.arena[s.off:s.off+int(s.plen)]...)
		b = binary.AppendUvarint(b, uint64(s.mlen))
		b = append(b, d.arena[s.off+int(s.plen):s.off+s.size()]...)
	}
	return b
}

// DecodeReplyTable reads what Encode wrote, and only its canonical form:
// every integer in its shortest varint, the entries in strictly increasing
// id order, nothing after them (so encoding what it returns gives b back).
// Every error wraps ErrCorruptState. It never allocates more than a small
// multiple of len(b).
func DecodeReplyTable(b []byte) (*ReplyTable, error) {
	if len(b) < 2 || b[0] != replyMagic {
		return nil, fmt.Errorf("%w: reply table: not a reply table encoding", ErrCorruptState)
	}
	if b[1] != replyVersion {
		return nil, fmt.Errorf("%w: reply table: unsupported version %d", ErrCorruptState, b[1])
	}
	r := reader{b: b[2:]}
	window := r.uvarint("window")
	maxEntries := r.uvarint("max entries")
	watermark := r.varint("watermark")
	n := r.uvarint("count")
	if r.err == nil {
		switch {
		case window < 1 || window > uint64(MaxReplyWindow.Milliseconds()):
			r.fail("window %d ms out of [1, %d]", window, MaxReplyWindow.Milliseconds())
		case maxEntries < 1 || maxEntries > MaxReplyEntries:
			r.fail("max entries %d out of [1, %d]", maxEntries, MaxReplyEntries)
		case watermark < 0 || watermark >= 1<<48:
			r.fail("watermark %d out of the UUIDv7 range", watermark)
		case n > maxEntries:
			r.fail("%d entries, more than the table's bound %d", n, maxEntries)
		case n > uint64(r.left()/minReplyEntry):
			r.fail("%d entries in %d bytes", n, r.left())
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: reply table: %v", ErrCorruptState, r.err)
	}
	// Built in locals, stored in the table once: a slice stored into a
	// heap object costs a write barrier while the collector runs.
	slots := make([]replySlot, 0, n)
	arena := make([]byte, 0, r.left()-int(n)*minReplyEntry) // the payloads and messages are within what is left
	for i := uint64(0); i < n && r.err == nil; i++ {
		raw := r.bytes(wire.IDLen, "operation id")
		code := r.varint("code")
		payload := r.bytes(r.uvarint("payload length"), "payload")
		msg := r.bytes(r.uvarint("message length"), "message")
		if r.err != nil {
			break
		}
		id, err := wire.ParseOperationIDBytes(raw)
		if err != nil {
			r.fail("entry %d: %v", i, err)
			break
		}
		if code < 0 || code > 1<<31-1 {
			r.fail("entry %d: code %d out of range", i, code)
			break
		}
		if len(slots) > 0 && compareIDs(slots[len(slots)-1].id, id) >= 0 {
			r.fail("entry %d: operation %s out of order", i, id)
			break
		}
		slots = append(slots, replySlot{id: id, off: len(arena), plen: uint32(len(payload)), mlen: uint32(len(msg)), code: int32(code)})
		arena = append(append(arena, payload...), msg...)
	}
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("%w: reply table: %v", ErrCorruptState, err)
	}
	t := &ReplyTable{window: time.Duration(window) * time.Millisecond, maxEntries: int(maxEntries), watermark: watermark}
	if len(slots) > 0 {
		t.replyData = &replyData{slots: slots, arena: arena, live: len(arena)}
	}
	return t, nil
}
