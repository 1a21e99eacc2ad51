package actor

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
)

// ReplyEntry is one entry of a ReplyTable: an operation id and its reply.
type ReplyEntry struct {
	ID    wire.OperationID
	Reply Reply
}

// Entries returns the table's entries, oldest id first (the payloads are
// copies).
func (t *ReplyTable) Entries() []ReplyEntry {
	out := make([]ReplyEntry, 0, len(t.order))
	for _, id := range t.order {
		r := t.replies[id]
		r.Payload = bytes.Clone(r.Payload)
		out = append(out, ReplyEntry{ID: id, Reply: r})
	}
	return out
}

// Oldest returns the oldest id in the table (false: the table is empty).
// Every id the table ever held that sorts before it was evicted.
func (t *ReplyTable) Oldest() (wire.OperationID, bool) {
	if len(t.order) == 0 {
		return wire.OperationID{}, false
	}
	return t.order[0], true
}

// RestoreReplyTable rebuilds a table from its bounds, its watermark (zero:
// nothing evicted yet) and its entries in any order: the inverse of
// Window, MaxEntries, Watermark and Entries, for a table kept entry by entry
// (a durable object's replies in etcd). It checks what DecodeReplyTable
// checks and refuses with an error wrapping ErrCorruptState.
func RestoreReplyTable(window time.Duration, maxEntries int, watermark time.Time, entries []ReplyEntry) (*ReplyTable, error) {
	if window <= 0 || window%time.Millisecond != 0 {
		return nil, fmt.Errorf("%w: reply table: window %v is not a positive whole number of milliseconds", ErrCorruptState, window)
	}
	t := &ReplyTable{window: window, maxEntries: maxEntries, replies: make(map[wire.OperationID]Reply, len(entries))}
	if !watermark.IsZero() {
		t.watermark = watermark.UnixMilli()
	}
	for _, e := range entries {
		if _, dup := t.replies[e.ID]; dup {
			return nil, fmt.Errorf("%w: reply table: operation %s twice", ErrCorruptState, e.ID)
		}
		r := e.Reply
		r.Payload = bytes.Clone(r.Payload)
		if len(r.Payload) == 0 {
			r.Payload = nil
		}
		t.replies[e.ID] = r
		t.order = append(t.order, e.ID)
	}
	slices.SortFunc(t.order, compareIDs)
	// The canonical encoding's decoder checks every bound.
	return DecodeReplyTable(t.Encode())
}
