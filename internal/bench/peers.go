package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
)

// The peers section (`meshctl bench --only peers`): meshloc beside a real
// peer, Proto.Actor Go, in one run, on clusters of one shape: three
// hosting members on loopback, a counter (an add that answers the new
// value), the same callers and windows, each side's figures measured in
// turn so that a burst of load from elsewhere falls on both.
//
//   - meshloc: an embedded etcd in this process; three meshnode processes
//     n1, n2, n3 and a gateway process gw (weight 0), meshnode's defaults;
//     the Go client, routed from etcd (direct) or through gw.
//   - Proto.Actor: three member processes and a client member process of
//     bench/peers (its defaults: the etcd cluster provider on the same
//     etcd, disthash, remote gRPC), driven by the client's commands.
//
// Figures, each meshloc's over Proto.Actor's: call p50/p99 with one caller
// (blocks of 50 alternating: peer, direct, peer, gateway), calls/s with 64
// in flight over 16 counters (alternating windows), first-call
// activations/s (64 in flight, halves alternating), then two faults under
// a load (8 callers adding to 64 counters at random; a call times out after
// 5 s on both sides): a graceful leave (SIGTERM: meshnode drains;
// Proto.Actor's member shuts down, its actors stop) and, after a fourth
// member joined in its place, a kill -9 of another member. For each fault:
// the calls that failed, the time from the fault to the end of the last
// failed call, and the counters whose value after is less than the adds
// acknowledged to them (restarted from zero).

const (
	peersCallTimeout = 5 * time.Second // Proto.Actor's default grain request timeout
	peersObjects     = 64              // counters under each fault's load
	peersCallers     = 8               // callers of the fault loads
	peersStall       = time.Second     // a call in flight this long: not served yet
)

// peersCluster is what the section runs: both sides and their processes.
type peersCluster struct {
	mesh     *mesh
	nodes    map[string]*child // meshnode processes, by name
	nodeAddr map[string]string // and their addresses
	members  map[string]*child // Proto.Actor member processes, by name
	memberAt map[string]string // their names, by address
	direct   side
	gateway  side
	peer     *peerSide
	exe      string // the peer program
}

func (x *run) peers() error {
	if x.cfg.TLS {
		x.step("peers: skipped with --tls (the peer runs plaintext)")
		return nil
	}
	src, err := findPeers(x.cfg.PeersDir)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(x.dir, "peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	exe := filepath.Join(dir, "protoactor-peer")
	x.step("peers: building the Proto.Actor peer (%s)", src)
	if err := buildPeers(x.ctx, src, exe); err != nil {
		return err
	}
	m, err := startEtcd(x.ctx, dir, false, nil)
	if err != nil {
		return err
	}
	defer m.close()
	pc := &peersCluster{mesh: m, nodes: map[string]*child{}, nodeAddr: map[string]string{}, members: map[string]*child{}, memberAt: map[string]string{}, exe: exe}
	defer pc.close()
	if err := x.peersStart(pc); err != nil {
		return err
	}
	desc, err := pc.peer.describe()
	if err != nil {
		return err
	}
	peerNote := fmt.Sprintf("%s %s (%s): %s", desc.Module, desc.Version, desc.Go, desc.Config)
	x.step("peers: %s", peerNote)
	if err := x.peersCalls(pc, peerNote); err != nil {
		return err
	}
	if err := x.peersActivations(pc); err != nil {
		return err
	}
	if err := x.peersFault(pc, "leave"); err != nil {
		return err
	}
	x.step("peers: a fourth member on each side in place of the one that left")
	if err := pc.startNode(x, "n4"); err != nil {
		return err
	}
	if err := pc.startMember(x, "p4"); err != nil {
		return err
	}
	if err := pc.peer.wait(3); err != nil {
		return err
	}
	return x.peersFault(pc, "kill")
}

// peersStart starts both clusters.
func (x *run) peersStart(pc *peersCluster) error {
	x.step("peers: meshloc: meshnode processes n1, n2, n3 and gateway gw (weight 0); Proto.Actor: member processes p1, p2, p3 and a client member")
	for _, n := range []string{"n1", "n2", "n3", "gw"} {
		if err := pc.startNode(x, n); err != nil {
			return err
		}
	}
	m := pc.mesh
	var err error
	if m.direct, err = client.New(x.ctx, client.Config{Etcd: m.ec, Timeout: peersCallTimeout}); err != nil {
		return err
	}
	if m.gateway, err = client.New(x.ctx, client.Config{Nodes: []string{pc.nodeAddr["gw"]}, Timeout: peersCallTimeout}); err != nil {
		return err
	}
	pc.direct, pc.gateway = newMeshSide(x.ctx, m.direct), newMeshSide(x.ctx, m.gateway)
	for _, p := range []string{"p1", "p2", "p3"} {
		if err := pc.startMember(x, p); err != nil {
			return err
		}
	}
	if pc.peer, err = startPeerClient(x.ctx, pc.exe, m.etcd.Endpoint()); err != nil {
		return err
	}
	return pc.peer.wait(3)
}

// startNode starts meshnode process name (gw: weight 0) with meshnode's
// defaults and waits for its owner key.
func (pc *peersCluster) startNode(x *run, name string) error {
	lis, err := freeport.Addr()
	if err != nil {
		return err
	}
	args := []string{"--name", name, "--etcd-endpoints", pc.mesh.etcd.Endpoint(), "--listen", lis, "--http", "", "--log-level", "warn"}
	if name == "gw" {
		args = append(args, "--weight", "0")
	}
	c, err := startChild(x.ctx, "node", nil, args...)
	if err != nil {
		return err
	}
	pc.nodes[name], pc.nodeAddr[name] = c, lis
	return recWaitOwner(x.ctx, pc.mesh.ec, keyspace.Default().Owner(name), c)
}

// startMember starts Proto.Actor member process name.
func (pc *peersCluster) startMember(x *run, name string) error {
	c, addr, err := startPeerMember(x.ctx, pc.exe, pc.mesh.etcd.Endpoint(), name)
	if err != nil {
		return err
	}
	pc.members[name], pc.memberAt[addr] = c, name
	return nil
}

// close ends every process: the clients, the members and nodes (killed:
// what is left of the run is not measured).
func (pc *peersCluster) close() {
	if pc.peer != nil {
		pc.peer.close()
	}
	for _, c := range pc.members {
		c.kill()
	}
	for _, c := range pc.nodes {
		c.kill()
	}
}

// peersCalls measures call latency with one caller and calls/s with 64 in
// flight, both sides in turn.
func (x *run) peersCalls(pc *peersCluster, peerNote string) error {
	p := x.cfg.Plan
	sides := []side{pc.peer, pc.direct, pc.gateway}
	for _, s := range sides {
		if _, _, err := s.activate("lat-", 1, 1); err != nil {
			return err
		}
		if _, _, err := s.activate("rate-", 16, 16); err != nil {
			return err
		}
	}
	x.step("peers: %d serial calls to one counter on each side in blocks of 50 (Proto.Actor, direct, Proto.Actor, gateway), then 64 in flight over 16 counters for %s on each (2 alternating windows)", p.Ops, p.Window)
	lat := make([][]time.Duration, len(sides))
	failed := make([]int64, len(sides))
	const block = 50
	for range max(1, p.Ops/block) {
		for _, j := range []int{0, 1, 0, 2} {
			l, f, err := sides[j].latency("lat-", block)
			if err != nil {
				return err
			}
			lat[j], failed[j] = append(lat[j], l...), failed[j]+f
		}
	}
	windows := make([]func(time.Duration) (int64, int64, time.Duration, error), len(sides))
	for j, s := range sides {
		windows[j] = func(d time.Duration) (int64, int64, time.Duration, error) {
			return s.rate("rate-", 16, 64, d)
		}
	}
	rates, oks, fails, err := alternate(2, p.Window, windows...)
	if err != nil {
		return err
	}
	for j := range sides {
		if len(lat[j]) == 0 {
			return fmt.Errorf("bench: peers: every serial call of side %d failed", j)
		}
	}
	n0 := int64(len(lat[0]))
	x.base(Measure{Name: peersBaseP50, Value: ms(pct(lat[0], 50)), Unit: "ms", N: n0, Note: joinNote(peerNote, failedNote(failed[0]))})
	x.base(Measure{Name: peersBaseP99, Value: ms(pct(lat[0], 99)), Unit: "ms", N: n0, Note: failedNote(failed[0])})
	x.base(Measure{Name: peersBaseRate, Value: rates[0], Unit: "/s", N: oks[0], Note: failedNote(fails[0])})
	meshNote := fmt.Sprintf("3 meshnode processes and a gateway process (weight 0), meshnode's defaults (lease %s); Go client call timeout %s",
		node.DefaultConfig().LeaseTTL, peersCallTimeout)
	for j, path := range []string{1: "Go client direct", 2: "through gateway"} {
		if j == 0 {
			continue
		}
		var t50, trate *Target
		note := failedNote(failed[j])
		if j == 1 { // the targets are the direct path's
			t50, trate, note = le(1), ge(1), joinNote(meshNote, note)
		}
		n := int64(len(lat[j]))
		x.fig(Measure{Name: "peers: call p50, " + path, Value: ms(pct(lat[j], 50)), Unit: "ms", N: n, Note: note}, peersBaseP50, t50)
		x.fig(Measure{Name: "peers: call p99, " + path, Value: ms(pct(lat[j], 99)), Unit: "ms", N: n, Note: failedNote(failed[j])}, peersBaseP99, nil)
		x.fig(Measure{Name: "peers: calls/s, " + path + ", 64 in flight", Value: rates[j], Unit: "/s", N: oks[j], Note: failedNote(fails[j])}, peersBaseRate, trate)
	}
	return nil
}

// Proto.Actor's figures, the baselines of the section.
const (
	peersBaseP50  = "Proto.Actor grain call p50, client member"
	peersBaseP99  = "Proto.Actor grain call p99, client member"
	peersBaseRate = "Proto.Actor grain calls/s, client member, 64 in flight"
	peersBaseAct  = "Proto.Actor first-call activations/s, 64 in flight"
)

// peersActivations measures first calls to new counters, 64 in flight,
// Plan.Ops of them on each side in two halves, the sides alternating.
func (x *run) peersActivations(pc *peersCluster) error {
	n := max(2, x.cfg.Plan.Ops)
	x.step("peers: first-call activations: %d new counters on each side, 64 in flight (halves alternating)", n)
	var el [2]time.Duration
	var failed [2]int64
	for _, half := range []string{"act-a-", "act-b-"} {
		for j, s := range []side{pc.direct, pc.peer} {
			d, f, err := s.activate(half, n/2, 64)
			if err != nil {
				return err
			}
			el[j], failed[j] = el[j]+d, failed[j]+f
		}
	}
	count := int64(n / 2 * 2)
	x.base(Measure{Name: peersBaseAct, Value: float64(count-failed[1]) / el[1].Seconds(), Unit: "/s", N: count, Note: failedNote(failed[1])})
	x.fig(Measure{Name: "peers: first-call activations/s, 64 in flight", Value: float64(count-failed[0]) / el[0].Seconds(), Unit: "/s", N: count, Note: failedNote(failed[0])}, peersBaseAct, ge(1))
	return nil
}
