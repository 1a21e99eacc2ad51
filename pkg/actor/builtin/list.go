package builtin

import (
	"github.com/meshloc/meshloc/pkg/actor"
)

// Bounds of a list: beyond them append is rejected, so a read always fits
// in a reply.
const (
	MaxListItems = 100_000
	MaxListBytes = 4 << 20 // the sum of the items' lengths
)

// listMaxStateBytes: JSON escapes a byte into at most 6, plus quotes and a
// comma per item.
const listMaxStateBytes = 6*MaxListBytes + 3*MaxListItems + 128

// list is a list of strings (UTF-8), appended to at the end.
//
//	append V   → {"length":n}
//	read       → {"items":[...]}
type list struct {
	items []string
	bytes int
}

type listState struct {
	V     int      `json:"v"`
	Items []string `json:"items"`
}

type listAppend struct {
	Length int `json:"length"`
}

type listRead struct {
	Items []string `json:"items"`
}

// Handle implements actor.Object.
func (l *list) Handle(_ actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "append":
		if err := wantArgs(ListType, method, args, "V"); err != nil {
			return nil, err
		}
		v, err := text("V", args[0])
		if err != nil {
			return nil, err
		}
		if len(l.items) >= MaxListItems || l.bytes+len(v) > MaxListBytes {
			return nil, actor.Rejected("list is full (%d items, %d bytes; limits %d, %d)", len(l.items), l.bytes, MaxListItems, MaxListBytes)
		}
		l.items = append(l.items, v)
		l.bytes += len(v)
		return reply(listAppend{Length: len(l.items)})
	case "read":
		if err := wantArgs(ListType, method, args); err != nil {
			return nil, err
		}
		items := l.items
		if items == nil {
			items = []string{}
		}
		return reply(listRead{Items: items})
	}
	return nil, actor.UnknownMethod(ListType, method)
}

// Snapshot implements actor.Object.
func (l *list) Snapshot() ([]byte, error) {
	items := l.items
	if items == nil {
		items = []string{}
	}
	return snapshot(listState{V: stateVersion, Items: items})
}

// Restore implements actor.Object.
func (l *list) Restore(b []byte) error {
	var s listState
	if err := restore(ListType, b, &s, &s.V); err != nil {
		return err
	}
	if s.Items == nil {
		return corrupt(ListType, "no items")
	}
	n := 0
	for _, it := range s.Items {
		n += len(it)
	}
	if len(s.Items) > MaxListItems || n > MaxListBytes {
		return corrupt(ListType, "%d items of %d bytes, over the limits", len(s.Items), n)
	}
	l.items, l.bytes = s.Items, n
	if len(l.items) == 0 {
		l.items = nil
	}
	return nil
}
