package verify

import (
	"encoding/json"
	"fmt"
	"sort"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Check implements Workload (the properties are in Sessions' doc).
func (w *Sessions) Check(h *History, final FinalState) Result {
	res := Result{Workload: w.Name()}
	ops := opsOf(h, w.Name())
	res.count(ops)
	w.mu.Lock()
	logs := append([]*sessionLog(nil), w.logs...)
	for _, why := range w.setup {
		res.violate("setup", "", why)
	}
	w.mu.Unlock()
	if len(logs) == 0 && len(w.setup) == 0 {
		res.violate("setup", "", "no session was ever opened")
	}

	// What each number and text means in a room's life, from every source.
	m := newRoomMeanings(&res)
	said := map[string]Op{} // by text, every say whatever its outcome
	acked := map[roomLife][]sayOf{}
	for _, o := range ops {
		if o.Kind != "say" || len(o.Input) != 1 || o.Final {
			continue
		}
		said[o.Input[0]] = o
		if o.Outcome != OK {
			continue
		}
		res.Acked++
		var r struct{ N *uint64 }
		if err := json.Unmarshal(o.Output, &r); err != nil || r.N == nil {
			res.violate("reply", o.Object, fmt.Sprintf("say reply %q", o.Output), o)
			continue
		}
		life := roomLife{o.Object, o.Fence.ObjectGeneration}
		m.note(life, *r.N, o.Input[0], o)
		acked[life] = append(acked[life], sayOf{n: *r.N, op: o})
	}
	for room, fin := range final.Reads {
		var hist struct{ Messages []received }
		if err := json.Unmarshal(fin.Output, &hist); err != nil {
			res.violate("reply", room, fmt.Sprintf("history reply %q", fin.Output), fin)
			continue
		}
		for _, msg := range hist.Messages {
			m.note(roomLife{room, fin.Fence.ObjectGeneration}, msg.N, msg.Text, fin)
		}
	}

	for _, l := range logs {
		l.mu.Lock()
		w.checkSession(&res, l, m, said, acked[roomLife{l.room, l.gen}])
		l.mu.Unlock()
	}
	res.finish()
	return res
}

// sayOf is an acknowledged say and the number the room gave it.
type sayOf struct {
	n  uint64
	op Op
}

// checkSession checks one session's log (l.mu held).
func (w *Sessions) checkSession(res *Result, l *sessionLog, m *roomMeanings, said map[string]Op, acked []sayOf) {
	res.figure("sessions", 1)
	res.figure("pushes", int64(len(l.pushes)))
	if len(l.gateways) > 1 {
		res.figure("resumed-elsewhere", 1)
	}
	where := fmt.Sprintf("session %d (stream %d, opened at %.3fs)", l.idx, l.stream, float64(l.openAt)/1e9)
	switch {
	case l.endAt == 0:
	case l.endCode == pb.Code_CODE_STATE_LOST:
		res.figure("ended-state-lost", 1)
	default:
		res.figure("ended-otherwise", 1)
		res.violate("session-ended", l.room, fmt.Sprintf("%s ended at %.3fs: %s", where, float64(l.endAt)/1e9, l.endErr))
	}
	got := map[uint64]bool{}
	for i, p := range l.pushes {
		got[p.N] = true
		if i > 0 && p.N != l.pushes[i-1].N+1 {
			res.violate("session-order", l.room, fmt.Sprintf("%s: message %d after %d", where, p.N, l.pushes[i-1].N))
		}
		if _, ok := said[p.Text]; !ok {
			res.Unexpected++
			res.violate("session-unexpected", l.room, fmt.Sprintf("%s: message %d %q was never said", where, p.N, p.Text))
		}
		if l.gen != 0 {
			m.note(roomLife{l.room, l.gen}, p.N, p.Text)
		}
	}
	if l.endAt != 0 || l.gen == 0 {
		return // ended (its room's state was lost: so were its pending pushes), or of an unknown life
	}
	// Open to the end: it has every say acknowledged in its room's life
	// after it opened, up to the one it waited for.
	var missing []Op
	for _, a := range acked {
		if a.op.Call > l.openAt && a.n <= l.target && !got[a.n] {
			res.Lost++
			missing = append(missing, a.op)
		}
	}
	if len(missing) > 0 {
		sort.Slice(missing, func(i, j int) bool { return missing[i].Call < missing[j].Call })
		res.violate("session-lost-push", l.room, fmt.Sprintf("%s: %d acknowledged says after it opened never reached it (it waited for message %d, has up to %d)",
			where, len(missing), l.target, lastN(l.pushes)), excerpt(missing, 5)...)
	}
}

func lastN(ps []received) uint64 {
	if len(ps) == 0 {
		return 0
	}
	return ps[len(ps)-1].N
}

// roomMeanings checks that in a room's life a message number means one
// text, and a text one number.
type roomMeanings struct {
	res    *Result
	byN    map[roomLife]map[uint64]string
	byText map[roomLife]map[string]uint64
}

func newRoomMeanings(res *Result) *roomMeanings {
	return &roomMeanings{res: res, byN: map[roomLife]map[uint64]string{}, byText: map[roomLife]map[string]uint64{}}
}

func (m *roomMeanings) note(life roomLife, n uint64, text string, ops ...Op) {
	if m.byN[life] == nil {
		m.byN[life], m.byText[life] = map[uint64]string{}, map[string]uint64{}
	}
	if t, ok := m.byN[life][n]; ok && t != text {
		m.res.violate("session-diverged", life.room, fmt.Sprintf("generation %d: message %d is %q and %q (two owners, or a lost execution replaced)", life.gen, n, t, text), ops...)
	}
	if k, ok := m.byText[life][text]; ok && k != n {
		m.res.Duplicated++
		m.res.violate("session-duplicated", life.room, fmt.Sprintf("generation %d: %q said as message %d and %d: executed twice", life.gen, text, k, n), ops...)
	}
	if _, ok := m.byN[life][n]; !ok {
		m.byN[life][n] = text
	}
	if _, ok := m.byText[life][text]; !ok {
		m.byText[life][text] = n
	}
}
