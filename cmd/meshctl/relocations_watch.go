package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
)

// watchIdle is how long the event stream may be silent before --watch
// takes it for hung and opens it again (locationd sends a heartbeat every
// 15 s by default).
const watchIdle = time.Minute

// relocationsWatch is the state of meshctl relocations --watch: what was
// printed for each relocation side, and which nodes were warned about.
type relocationsWatch struct {
	ctx     context.Context
	c       *client.Admin
	q       api.RelocationsQuery
	timeout time.Duration
	out     io.Writer
	seen    map[string]string // relocation id + role → the state printed
	ended   map[string]bool   // relocation id + role → its end was printed
	warned  map[string]bool   // node id → a warning is out for it
}

// watchRelocations prints the relocations listed now, then a line each time
// a relocation side starts or ends, from locationd's event stream, until
// ctx ends (then nil: Ctrl-C is how it stops). The list is read again
// whenever the stream says events were missed: a new stream that did not
// resume, or locationd's stream from a node that broke and came back.
func watchRelocations(ctx context.Context, c *client.Admin, q api.RelocationsQuery, timeout time.Duration, out io.Writer) error {
	w := &relocationsWatch{ctx: ctx, c: c, q: q, timeout: timeout, out: out, seen: map[string]string{}, ended: map[string]bool{}, warned: map[string]bool{}}
	return followEvents(ctx, c, client.EventsQuery{Types: []string{api.EventRelocation, api.EventWatch}, Object: q.Object}, w.event)
}

// event handles one event of the stream.
func (w *relocationsWatch) event(ev client.Event) error {
	switch ev.Type {
	case api.EventHello:
		var h api.Hello
		if err := json.Unmarshal(ev.Data, &h); err != nil || !h.Resumed {
			w.snapshot()
		}
	case api.EventRelocation:
		var rel api.Relocation
		if err := json.Unmarshal(ev.Data, &rel); err != nil {
			w.warn("an undecodable relocation event: %v", err)
			return nil
		}
		w.print(rel)
	case api.EventWatch:
		var nw api.NodeWatch
		if err := json.Unmarshal(ev.Data, &nw); err != nil {
			return nil
		}
		switch {
		case !nw.Connected && !w.warned[nw.Node]:
			w.warned[nw.Node] = true
			w.warn("locationd lost its stream from node %s (%s), its relocations may be missed: %s", nw.Node, dash(nw.Address), dash(nw.Error))
		case nw.Connected && w.warned[nw.Node]:
			delete(w.warned, nw.Node)
			w.snapshot() // what it reported meanwhile
		}
	}
	return nil
}

// snapshot reads and prints the relocations listed now.
func (w *relocationsWatch) snapshot() {
	ctx, cancel := context.WithTimeout(w.ctx, w.timeout)
	defer cancel()
	r, _, err := w.c.Relocations(ctx, w.q)
	if err != nil {
		w.warn("%v", err)
		return
	}
	rels := r.Relocations
	slices.SortStableFunc(rels, func(a, b api.Relocation) int { return cmp.Compare(a.StartedUnixMs, b.StartedUnixMs) })
	for _, rel := range rels {
		w.print(rel)
	}
	for _, u := range r.Unreachable {
		if !w.warned[u.ID] {
			w.warned[u.ID] = true
			w.warn("node %s (%s) did not answer: %s", u.ID, dash(u.Address), u.Error)
		}
	}
}

// print writes rel's line if its state is new: a side that ended is never
// printed again (an older in-flight report read after it is stale).
func (w *relocationsWatch) print(rel api.Relocation) {
	if w.q.InFlight != nil && rel.InFlight() != *w.q.InFlight {
		return
	}
	if w.q.Object != "" && rel.Object != w.q.Object {
		return
	}
	key := rel.RelocationID + " " + rel.Role
	state := rel.Phase
	if !rel.InFlight() {
		state = rel.Outcome
		if rel.Outcome != api.OutcomeCompleted {
			state += " " + dash(rel.Code) + ": " + dash(rel.Message)
		} else {
			state += " in " + interruption(rel.InterruptionMicros, "0s")
		}
	}
	if w.ended[key] || w.seen[key] == state {
		return
	}
	w.seen[key] = state
	w.ended[key] = !rel.InFlight()
	fmt.Fprintf(w.out, "%s %s %s %s %s -> %s %s\n", now().Format("15:04:05.000"), shortID(rel.RelocationID), rel.Object,
		dash(rel.Role), dash(rel.Source), dash(rel.Target), state)
}

// warn writes a warning line.
func (w *relocationsWatch) warn(format string, args ...any) {
	fmt.Fprintf(w.out, "%s warning: %s\n", now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
