package actor

import (
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
	if t.replyData == nil {
		return []ReplyEntry{}
	}
	out := make([]ReplyEntry, 0, len(t.slots))
	for i, s := range t.slots {
		out = append(out, ReplyEntry{ID: s.id, Reply: t.reply(i)})
	}
	return out
}

// Oldest returns the oldest id in the table (false: the table is empty).
// Every id the table ever held that sorts before it was evicted.
func (t *ReplyTable) Oldest() (wire.OperationID, bool) {
	if t.Len() == 0 {
		return wire.OperationID{}, false
	}
	return t.slots[0].id, true
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
	t := &ReplyTable{window: window, maxEntries: maxEntries}
	if !watermark.IsZero() {
		t.watermark = watermark.UnixMilli()
	}
	sorted := slices.SortedFunc(slices.Values(entries), func(a, b ReplyEntry) int { return compareIDs(a.ID, b.ID) })
	for i, e := range sorted {
		if i > 0 && e.ID == sorted[i-1].ID {
			return nil, fmt.Errorf("%w: reply table: operation %s twice", ErrCorruptState, e.ID)
		}
		t.appendSlot(e.ID, e.Reply.Code, e.Reply.Payload, e.Reply.Message)
	}
	// The canonical encoding's decoder checks every bound.
	return DecodeReplyTable(t.Encode())
}
