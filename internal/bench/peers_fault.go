package bench

import (
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"
)

// A fault of the peers section under a load, on each side in turn
// (Proto.Actor first), to the member of that side that holds the most of
// the load's counters (each side's placement decides where they live):
// "leave" sends it SIGTERM (a graceful leave: Proto.Actor's member shuts
// down, its actors stop; meshnode drains its objects onto the others),
// "kill" SIGKILL. The load (8 callers adding 1 to 64 counters at random) runs a
// moment before the fault and until the side is served again: the process
// exited, no call failed for a quiet while and none has been in flight
// for peersStall; at most a minute after the exit. Then every counter is
// read: one whose value is less than the adds acknowledged to it (and
// its first) restarted from zero.

// faultResult is one side's fault.
type faultResult struct {
	victim string // the member signalled
	held   int    // how many of the counters it held
	load   loadResult
	lost   int           // counters restarted from zero (or not read)
	unread int           // of them, counters that did not answer
	served time.Duration // from the fault to the end of the last failed call
	exited time.Duration // from the fault to the process's exit
}

func (x *run) peersFault(pc *peersCluster, kind string) error {
	prefix := kind + "-"
	sig, signame := syscall.SIGTERM, "SIGTERM"
	if kind == "kill" {
		sig, signame = syscall.SIGKILL, "SIGKILL"
	}
	x.step("peers: %s under load: %d counters on each side, %d callers; %s to the member holding the most of them, Proto.Actor's then meshloc's", kind, peersObjects, peersCallers, signame)
	var res [2]faultResult
	for j, s := range []side{pc.peer, pc.direct} {
		if _, failed, err := s.activate(prefix, peersObjects, 64); err != nil || failed > 0 {
			return fmt.Errorf("bench: peers: creating the %s counters: %d failed (%v)", kind, failed, err)
		}
		name, victim, held, err := pc.victim(s, j == 0, prefix)
		if err != nil {
			return err
		}
		r, err := x.peersFaultOn(s, prefix, victim, sig)
		if err != nil {
			return fmt.Errorf("bench: peers: %s of %s: %w", kind, name, err)
		}
		r.victim, r.held = name, held
		res[j] = r
	}
	peer, mesh := res[0], res[1]
	pname := map[string]string{"leave": "Proto.Actor member shutdown under load", "kill": "Proto.Actor kill -9 of a member under load"}[kind]
	mname := map[string]string{"leave": "peers: drain under load", "kill": "peers: kill -9 of a node under load"}[kind]
	var lostTarget *Target
	if kind == "leave" {
		lostTarget = le(0) // every counter keeps its value
	}
	for _, f := range []struct {
		suffix string
		m      func(r faultResult) Measure
		t      *Target
	}{
		{": calls failed", func(r faultResult) Measure {
			return Measure{Value: float64(r.load.Failed), Unit: "calls", N: r.load.OK + r.load.Failed,
				Note: fmt.Sprintf("of %d; %s %s to %s, which held %d of the %d counters, exited %s after it; longest call %s", r.load.OK+r.load.Failed,
					signame, map[string]string{"leave": "(graceful)", "kill": "(kill -9)"}[kind], r.victim, r.held, len(r.load.Acked), r.exited.Round(time.Millisecond), time.Duration(r.load.MaxCallNs).Round(time.Millisecond))}
		}, nil},
		{": until served again", func(r faultResult) Measure {
			return Measure{Value: r.served.Seconds(), Unit: "s", N: r.load.Failed, Note: "from the signal to the end of the last failed call (0: none failed)"}
		}, nil},
		{": counters restarted from zero", func(r faultResult) Measure {
			note := fmt.Sprintf("%d of %d", r.lost, len(r.load.Acked))
			if r.unread > 0 {
				note += fmt.Sprintf(" (%d did not answer)", r.unread)
			}
			return Measure{Value: 100 * float64(r.lost) / float64(max(1, len(r.load.Acked))), Unit: "%", N: int64(len(r.load.Acked)), Note: note}
		}, lostTarget},
	} {
		b := f.m(peer)
		b.Name = pname + f.suffix
		x.base(b)
		m := f.m(mesh)
		m.Name = mname + f.suffix
		if kind == "kill" && f.suffix == ": calls failed" {
			m.Note = joinNote(m.Note, "the first call to each counter re-created elsewhere is answered state_lost (a failure), where Proto.Actor's restarts from zero unsaid")
		}
		x.fig(m, b.Name, f.t)
	}
	x.step("peers: %s: Proto.Actor (%s held %d): %d calls failed, served again after %s, %d of %d counters restarted from zero; meshloc (%s held %d): %d, %s, %d of %d",
		kind, peer.victim, peer.held, peer.load.Failed, peer.served.Round(time.Millisecond), peer.lost, peersObjects,
		mesh.victim, mesh.held, mesh.load.Failed, mesh.served.Round(time.Millisecond), mesh.lost, peersObjects)
	return nil
}

// victim is the member of a side that holds the most of the counters
// prefix0.. (ties: the first name), and how many it holds.
func (pc *peersCluster) victim(s side, peer bool, prefix string) (string, *child, int, error) {
	owners, err := s.owners(prefix, peersObjects)
	if err != nil {
		return "", nil, 0, err
	}
	held := map[string]int{}
	for _, o := range owners {
		if peer {
			o = pc.memberAt[o]
		}
		held[o]++
	}
	procs := pc.nodes
	if peer {
		procs = pc.members
	}
	best := ""
	for _, name := range slices.Sorted(maps.Keys(held)) {
		if best == "" || held[name] > held[best] {
			best = name
		}
	}
	c, ok := procs[best]
	if !ok || best == "gw" {
		return "", nil, 0, fmt.Errorf("bench: peers: the counters live on %v: no member of ours named %q", held, best)
	}
	return best, c, held[best], nil
}

// peersFaultOn runs the load on s, signals victim, waits until s is served
// again, and reads the counters.
func (x *run) peersFaultOn(s side, prefix string, victim *child, sig syscall.Signal) (faultResult, error) {
	var r faultResult
	if err := s.loadStart(prefix, peersObjects, peersCallers); err != nil {
		return r, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = s.loadStop()
		}
	}()
	if err := recSleep(x.ctx, min(time.Second, max(200*time.Millisecond, x.cfg.Plan.Window/5))); err != nil {
		return r, err
	}
	fault := time.Now()
	if err := victim.cmd.Process.Signal(sig); err != nil {
		return r, err
	}
	t := time.NewTimer(2 * time.Minute)
	defer t.Stop()
	select {
	case <-victim.exited:
		r.exited = time.Since(fault)
	case <-t.C:
		victim.kill()
		return r, fmt.Errorf("bench: peers: the process did not exit within 2 min of %s: %s", sig, victim.stderr())
	case <-x.ctx.Done():
		return r, x.ctx.Err()
	}
	quiet := min(2*time.Second, max(500*time.Millisecond, x.cfg.Plan.Window/2))
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := s.loadStatus()
		if err != nil {
			return r, err
		}
		now := time.Now()
		last := max(fault.UnixNano(), st.LastFailUnixNs)
		if now.UnixNano()-last >= int64(quiet) && (st.OldestCallUnixNs == 0 || now.UnixNano()-st.OldestCallUnixNs < int64(peersStall)) {
			break
		}
		if now.After(deadline) {
			return r, fmt.Errorf("bench: peers: not served again a minute after the process exited (%d calls failed, the last %s after the signal)", st.Failed, time.Duration(st.LastFailUnixNs-fault.UnixNano()))
		}
		if err := recSleep(x.ctx, 50*time.Millisecond); err != nil {
			return r, err
		}
	}
	load, err := s.loadStop()
	stopped = true
	if err != nil {
		return r, err
	}
	r.load = load
	if load.Failed > 0 && load.LastFailUnixNs > fault.UnixNano() {
		r.served = time.Duration(load.LastFailUnixNs - fault.UnixNano())
	}
	values, err := s.read(prefix, peersObjects)
	if err != nil {
		return r, err
	}
	for i, v := range values {
		if v < 0 {
			r.unread++
		}
		if i < len(load.Acked) && v < 1+load.Acked[i] {
			r.lost++
		}
	}
	return r, nil
}
