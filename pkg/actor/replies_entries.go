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
	out := make([]ReplyEntry, 0, len(t.entries))
	for _, e := range t.entries {
		e.Reply.Payload = bytes.Clone(e.Reply.Payload)
		out = append(out, e)
	}
	return out
}

// Oldest returns the oldest id in the table (false: the table is empty).
// Every id the table ever held that sorts before it was evicted.
func (t *ReplyTable) Oldest() (wire.OperationID, bool) {
	if len(t.entries) == 0 {
		return wire.OperationID{}, false
	}
	return t.entries[0].ID, true
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
	t := &ReplyTable{window: window, maxEntries: maxEntries, entries: make([]ReplyEntry, 0, len(entries))}
	if !watermark.IsZero() {
		t.watermark = watermark.UnixMilli()
	}
	for _, e := range entries {
		r := e.Reply
		r.Payload = bytes.Clone(r.Payload)
		if len(r.Payload) == 0 {
			r.Payload = nil
		}
		t.entries = append(t.entries, ReplyEntry{ID: e.ID, Reply: r})
	}
	slices.SortFunc(t.entries, func(a, b ReplyEntry) int { return compareIDs(a.ID, b.ID) })
	for i := 1; i < len(t.entries); i++ {
		if t.entries[i].ID == t.entries[i-1].ID {
			return nil, fmt.Errorf("%w: reply table: operation %s twice", ErrCorruptState, t.entries[i].ID)
		}
	}
	// The canonical encoding's decoder checks every bound.
	return DecodeReplyTable(t.Encode())
}
