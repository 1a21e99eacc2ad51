package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// sessions measures a session's call and push latency through the gateway
// gw, on a room owned by n1 or n2: a speaker session says a numbered text,
// a listener session (same room, same gateway) receives the room's push of
// it. The call latency is the speaker's reply; the push latency from the
// say's send to the listener's receipt (client → gateway → owner, then
// owner → gateway → client: two hops each way). Idle, then while the room
// is relocated back and forth without a pause. Every push must arrive:
// a missing one fails the run.
func (x *run) sessions() error {
	p := x.cfg.Plan
	room, err := x.m.create(x.ctx, "actor/room/bench", "join", "bench")
	if err != nil {
		return err
	}
	speaker, err := x.m.gateway.OpenSession(x.ctx, room.name)
	if err != nil {
		return err
	}
	listener, err := x.m.gateway.OpenSession(x.ctx, room.name)
	if err != nil {
		speaker.Close()
		return err
	}
	arrived := &arrivals{at: map[int]time.Time{}, changed: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	defer func() { speaker.Close(); listener.Close(); wg.Wait() }()
	wg.Go(func() { drain(speaker) }) // the speaker gets its own says too
	wg.Go(func() { arrived.record(listener) })

	next := 0
	for _, storm := range []bool{false, true} {
		how := ""
		var stop func() []window
		if storm {
			how = ", relocation storm"
			stop = x.moveLoop(room)
		}
		x.step("sessions%s: %d calls, then %d says through gateway gw, each pushed to a second session", how, p.Ops, p.Ops)
		var calls, sayLat, pushes []time.Duration
		var ran []window
		var failed int64
		sent := map[int]time.Time{}
		for k := range 2 * p.Ops {
			i, method, arg := next, "join", "bench" // a call that pushes nothing
			if k >= p.Ops {
				method, arg = "say", strconv.Itoa(i)
				next++
			}
			t0 := time.Now()
			if _, err := speaker.Call(x.ctx, method, arg); err != nil {
				failed++
				continue
			}
			d := time.Since(t0)
			ran = append(ran, window{t0, t0.Add(d)})
			if method == "join" {
				calls = append(calls, d)
				continue
			}
			sayLat = append(sayLat, d)
			sent[i] = t0
		}
		moved := int64(-1)
		var moves []window
		if stop != nil {
			moves = stop()
			moved = int64(len(moves))
		}
		missing := arrived.wait(x.ctx, sent, 10*time.Second)
		if missing > 0 {
			return fmt.Errorf("bench: %d of %d pushes%s never reached the listening session", missing, len(sent), how)
		}
		for i, t0 := range sent {
			pushes = append(pushes, arrived.get(i).Sub(t0))
		}
		if len(calls) == 0 || len(sayLat) == 0 {
			return fmt.Errorf("bench: every session call%s failed", how)
		}
		note := failedNote(failed)
		if moved >= 0 {
			note = joinNote(note, fmt.Sprintf("storm: %d relocations", moved))
		}
		nc, ns, np := int64(len(calls)), int64(len(sayLat)), int64(len(pushes))
		cp50 := Measure{Name: "session call p50" + how, Value: ms(pct(calls, 50)), Unit: "ms", N: nc, Note: note}
		cp99 := Measure{Name: "session call p99" + how, Value: ms(pct(calls, 99)), Unit: "ms", N: nc, Note: note}
		sp50 := Measure{Name: "session say p50" + how, Value: ms(pct(sayLat, 50)), Unit: "ms", N: ns, Note: joinNote(note, "each say pushes to 2 sessions")}
		pp50 := Measure{Name: "session push p50" + how, Value: ms(pct(pushes, 50)), Unit: "ms", N: np, Note: note}
		pp99 := Measure{Name: "session push p99" + how, Value: ms(pct(pushes, 99)), Unit: "ms", N: np, Note: note}
		if storm {
			if in := interruptions(moves, ran); len(in) > 0 {
				n := int64(len(in))
				x.fig(Measure{Name: "session interruption p50", Value: ms(pct(in, 50)), Unit: "ms", N: n, Note: "the longest call of each move"}, "session call p50", nil)
				x.fig(Measure{Name: "session interruption p99", Value: ms(pct(in, 99)), Unit: "ms", N: n, Note: "the longest call of each move"}, "session call p99", nil)
			}
			x.fig(cp50, "session call p50", nil)
			x.fig(cp99, "session call p99", nil)
			x.fig(sp50, "session say p50", nil)
			x.fig(pp50, "session push p50", nil)
			x.fig(pp99, "session push p99", nil)
			continue
		}
		// A session call takes the gateway's path, kept in order: beside
		// a plain call through the same gateway (the calls section). A
		// push is a say's reply path plus the delivery: beside a raw gRPC
		// round trip.
		x.fig(cp50, "call p50, through gateway", le(2))
		x.fig(cp99, "call p99, through gateway", nil)
		x.fig(sp50, "session call p50", nil)
		x.fig(pp50, "raw gRPC unary p50", nil)
		x.fig(pp99, "raw gRPC unary p99", nil)
	}
	return nil
}

// window is when something ran.
type window struct{ from, to time.Time }

// moveLoop relocates o to the other node again and again, one move at a
// time, until stop; stop returns when each completed move ran.
func (x *run) moveLoop(o *owned) (stop func() []window) {
	ctx, cancel := context.WithCancel(x.ctx)
	var moves []window
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			t0 := time.Now()
			// Foreground: the room moves without a pause while its
			// sessions call (each move is measured).
			if _, err := x.m.move(ctx, o, node.RelocateOptions{Foreground: true}); err == nil {
				moves = append(moves, window{t0, time.Now()})
			}
		}
	})
	return func() []window { cancel(); wg.Wait(); return moves }
}

// interruptions is, for each move, how long the session's longest call
// that overlapped it took: what a client of the session saw of the move
// (its calls wait at the gateway from the seal to the route).
func interruptions(moves, calls []window) []time.Duration {
	var out []time.Duration
	for _, m := range moves {
		var longest time.Duration
		for _, c := range calls {
			if c.from.Before(m.to) && c.to.After(m.from) {
				longest = max(longest, c.to.Sub(c.from))
			}
		}
		if longest > 0 {
			out = append(out, longest)
		}
	}
	return out
}

// drain receives a session's pushes until it ends.
func drain(s *client.Session) {
	for {
		if _, err := s.Recv(context.Background()); err != nil {
			return
		}
	}
}

// arrivals are when each numbered say reached the listening session.
type arrivals struct {
	mu      sync.Mutex
	at      map[int]time.Time
	changed chan struct{}
}

func (a *arrivals) record(s *client.Session) {
	for {
		p, err := s.Recv(context.Background())
		if err != nil {
			return
		}
		now := time.Now()
		var m struct{ Text string }
		if json.Unmarshal(p.Payload, &m) != nil {
			continue
		}
		i, err := strconv.Atoi(m.Text)
		if err != nil {
			continue
		}
		a.mu.Lock()
		a.at[i] = now
		a.mu.Unlock()
		select {
		case a.changed <- struct{}{}:
		default:
		}
	}
}

func (a *arrivals) get(i int) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.at[i]
}

// wait waits up to d for every say of sent to arrive; it returns how many
// did not.
func (a *arrivals) wait(ctx context.Context, sent map[int]time.Time, d time.Duration) int {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		missing := 0
		for i := range sent {
			if _, ok := a.at[i]; !ok {
				missing++
			}
		}
		a.mu.Unlock()
		if missing == 0 {
			return 0
		}
		select {
		case <-a.changed:
		case <-deadline.C:
			return missing
		case <-ctx.Done():
			return missing
		}
	}
}
