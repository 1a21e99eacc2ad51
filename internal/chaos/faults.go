package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/meshloc/meshloc/internal/etcdfault"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The fault kinds (the report counts faults by kind).
const (
	KillOwner      = "kill-owner"       // SIGKILL the node owning the most workload objects; restart it
	KillSource     = "kill-source"      // SIGKILL the source of a relocation in flight; restart it
	KillTarget     = "kill-target"      // SIGKILL the target of a relocation in flight; restart it
	KillGateway    = "kill-gateway"     // SIGKILL the node holding the most sessions (owning no workload object if one does); restart it
	PauseNode      = "pause-node"       // SIGSTOP an owner for 3 lease TTLs, then SIGCONT
	PartitionNode  = "partition-node"   // every connection to a node blackholed (peers and clients)
	PartitionEtcd  = "partition-etcd"   // a node cut off from etcd (not from peers and clients) past its TTL
	LinkDelay      = "link-delay"       // every node's inbound traffic delayed
	LinkDuplicate  = "link-duplicate"   // bytes of node connections duplicated (framing broken: connections reset at the heal)
	LinkCorrupt    = "link-corrupt"     // bytes of node connections corrupted (connections reset at the heal)
	KillEtcdMember = "kill-etcd-member" // SIGKILL one etcd member (3 members); restart it
	MoveLeader     = "move-leader"      // etcd leadership moved to another member (3 members)
	Failpoint      = "failpoint"        // a node restarted with a failpoint armed, until it fired
	// EtcdSlowPartition delays a node's etcd replies (by less than its
	// keep-alive request timeout: the keep-alives still succeed, late), then
	// cuts it off from etcd: the lease deadline must count from the send.
	EtcdSlowPartition = "etcd-slow-partition"
	// RollingRestart SIGTERMs every node in turn (it drains: its objects
	// move to the others), waits for its exit and restarts it (rolling.go).
	RollingRestart = "rolling-restart"
)

// Kinds are the fault kinds that need no failpoint build, in the order
// "all" schedules them.
var Kinds = []string{KillOwner, KillSource, KillTarget, KillGateway, PauseNode, PartitionNode, PartitionEtcd, LinkDelay,
	LinkDuplicate, LinkCorrupt, KillEtcdMember, MoveLeader, RollingRestart}

// FailpointSpecs are the failpoints a "failpoint" fault cycles through: a
// crash at each step of a relocation, and a pause between execute and reply.
var FailpointSpecs = []string{
	"source.after-seal=crash@2",
	"source.chunk=crash@3",
	"source.after-last-chunk=crash@2",
	"source.before-cutover=crash@2",
	"target.before-ready=crash@2",
	"target.before-commit=crash@2",
	"target.after-commit=crash@2",
	"target.before-replay=crash@2",
	"target.before-relay=crash@1",
	"node.before-reply=sleep:4s@20",
}

// Faults knows which objects the workloads use (to pick victims).
type Faults struct {
	c       *Cluster
	objects map[string]bool
	rng     *rand.Rand
	fp      int // next failpoint spec
}

// Faults returns the fault maker for a run over objects.
func (c *Cluster) Faults(objects []string, seed uint64) *Faults {
	f := &Faults{c: c, objects: map[string]bool{}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for _, o := range objects {
		f.objects[o] = true
	}
	return f
}

// ProbeFaults is a fault maker for a cluster not started yet, to check
// fault kinds against its configuration (ParseKinds, Need).
func ProbeFaults(cfg Config) *Faults { return &Faults{c: &Cluster{cfg: cfg}} }

// Need says what a kind needs of the cluster ("" when the cluster can run it).
func (f *Faults) Need(kind string) string {
	switch kind {
	case PartitionNode, PartitionEtcd, EtcdSlowPartition, LinkDelay, LinkDuplicate, LinkCorrupt:
		if !f.c.cfg.Proxies {
			return kind + " needs the proxies"
		}
	case KillEtcdMember, MoveLeader:
		if f.c.cfg.EtcdMembers < 3 {
			return kind + " needs 3 etcd members"
		}
	case KillOwner, KillSource, KillTarget, KillGateway, PauseNode, Failpoint, RollingRestart:
	default:
		if !strings.HasPrefix(kind, Failpoint+":") {
			return "unknown fault kind " + kind
		}
	}
	return ""
}

// Fault returns the fault of kind to start at at. A "failpoint" fault
// takes the next of FailpointSpecs; "failpoint:<name>=<action>" names one.
func (f *Faults) Fault(kind string, at time.Duration) (verify.Fault, error) {
	if why := f.Need(kind); why != "" {
		return verify.Fault{}, errors.New("chaos: " + why)
	}
	inject := f.injector(kind)
	name := kind
	if strings.HasPrefix(kind, Failpoint) {
		name = Failpoint
	}
	return verify.Fault{Kind: name, At: at, Inject: func(ctx context.Context) error {
		f.c.faultMu.Lock()
		defer f.c.faultMu.Unlock()
		err := inject(ctx)
		return errors.Join(err, f.revive(ctx, kind))
	}}, nil
}

// Schedule spreads faults of the given kinds (cycled) over a run of
// duration d, one every spacing from first on.
func (f *Faults) Schedule(kinds []string, d, first, spacing time.Duration) ([]verify.Fault, error) {
	var out []verify.Fault
	if len(kinds) == 0 {
		return nil, nil
	}
	for i, at := 0, first; at+spacing/2 <= d; i, at = i+1, at+spacing {
		ft, err := f.Fault(kinds[i%len(kinds)], at)
		if err != nil {
			return nil, err
		}
		out = append(out, ft)
	}
	return out, nil
}

func (f *Faults) ttl() time.Duration { return f.c.cfg.LeaseTTL }

func (f *Faults) injector(kind string) func(ctx context.Context) error {
	switch kind {
	case KillOwner:
		return func(ctx context.Context) error { return f.kill(ctx, f.busiest(ctx), "owner of the most objects") }
	case KillSource, KillTarget:
		role := strings.TrimPrefix(kind, "kill-")
		return func(ctx context.Context) error {
			n, why := f.inRelocation(ctx, role)
			return f.kill(ctx, n, why)
		}
	case KillGateway:
		return func(ctx context.Context) error {
			n, why := f.gateway(ctx)
			return f.kill(ctx, n, why)
		}
	case PauseNode:
		return func(ctx context.Context) error { return f.pause(ctx, f.busiest(ctx), 3*f.ttl()) }
	case PartitionNode:
		return func(ctx context.Context) error {
			n := f.busiest(ctx)
			f.c.cfg.logf("chaos: partition %s from peers and clients for %v", n.Name, 2*f.ttl())
			n.ingress.SetMode(tcpproxy.Blackhole)
			sleep(ctx, 2*f.ttl())
			n.ingress.SetMode(tcpproxy.Forward)
			n.ingress.ResetConns()
			return f.settle(ctx, n)
		}
	case PartitionEtcd:
		return func(ctx context.Context) error {
			n := f.busiest(ctx)
			f.c.cfg.logf("chaos: cut %s off from etcd for %v", n.Name, 2*f.ttl()+time.Second)
			for _, p := range n.etcd {
				p.SetMode(tcpproxy.Blackhole)
			}
			sleep(ctx, 2*f.ttl()+time.Second)
			for _, p := range n.etcd {
				p.SetMode(tcpproxy.Forward)
				p.ResetConns()
			}
			return f.settle(ctx, n)
		}
	case EtcdSlowPartition:
		return func(ctx context.Context) error {
			n := f.busiest(ctx)
			// The keep-alive request timeout is min(TTL/3, 2 s); the margin
			// TTL/5: a delay between the two.
			delay := min(f.ttl()/3, 2*time.Second) * 19 / 20
			f.c.cfg.logf("chaos: %s's etcd replies delayed %v for %v, then cut off for %v", n.Name, delay, 3*f.ttl()/2, f.ttl()+3*time.Second)
			for _, p := range n.etcd {
				p.SetDelays(0, delay)
			}
			sleep(ctx, 3*f.ttl()/2)
			for _, p := range n.etcd {
				p.SetMode(tcpproxy.Blackhole)
			}
			sleep(ctx, f.ttl()+3*time.Second)
			for _, p := range n.etcd {
				p.SetDelays(0, 0)
				p.SetMode(tcpproxy.Forward)
				p.ResetConns()
			}
			return f.settle(ctx, n)
		}
	case LinkDelay, LinkDuplicate, LinkCorrupt:
		return func(ctx context.Context) error {
			d := 3 * time.Second
			f.c.cfg.logf("chaos: %s on every node's connections for %v", kind, d)
			for _, n := range f.c.nodes {
				switch kind {
				case LinkDelay:
					n.ingress.SetDelays(20*time.Millisecond, 80*time.Millisecond)
				case LinkDuplicate:
					n.ingress.SetDuplicateRate(0.01)
				case LinkCorrupt:
					n.ingress.SetCorruptRate(0.01)
				}
			}
			sleep(ctx, d)
			for _, n := range f.c.nodes {
				f.c.forwardClean(n)
				if kind != LinkDelay {
					// TCP and TLS never deliver duplicated or changed bytes:
					// these faults stand for a link that breaks its
					// connections. A stream whose bytes were duplicated can
					// stay open with its HTTP/2 header compression out of
					// step (every later call answered RST_STREAM
					// PROTOCOL_ERROR, the connection never closed), which
					// no real link leaves: the heal closes them, as the
					// broken link would have.
					n.ingress.ResetConns()
				}
			}
			return nil
		}
	case KillEtcdMember:
		return func(ctx context.Context) error {
			m := f.c.members[f.rng.IntN(len(f.c.members))]
			f.c.cfg.logf("chaos: SIGKILL etcd member %s", m.Name)
			m.proc.Kill()
			sleep(ctx, f.ttl())
			if err := f.c.startMember(m, f.c.initialCluster()); err != nil {
				return err
			}
			return f.c.waitMember(ctx, m)
		}
	case RollingRestart:
		return f.rollingRestart
	case MoveLeader:
		return func(ctx context.Context) error {
			mctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			from, to, err := etcdfault.MoveLeader(mctx, f.c.EtcdEndpoints(), 0)
			f.c.cfg.logf("chaos: etcd leader moved %x → %x (%v)", from, to, err)
			return err
		}
	}
	spec, _ := strings.CutPrefix(kind, Failpoint+":")
	return func(ctx context.Context) error {
		s := spec
		if s == "" || s == Failpoint {
			s = FailpointSpecs[f.fp%len(FailpointSpecs)]
			f.fp++
		}
		return f.failpoint(ctx, s)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// busiest is the live node owning the most workload objects (any live node
// when etcd cannot say).
func (f *Faults) busiest(ctx context.Context) *Node {
	per := f.owned(ctx)
	var best *Node
	for _, n := range f.c.nodes {
		if !n.proc.Alive() {
			continue
		}
		if best == nil || per[n.Name] > per[best.Name] {
			best = n
		}
	}
	if best == nil {
		best = f.c.nodes[0]
	}
	return best
}

// owned counts the workload objects each node owns (empty when etcd cannot
// say).
func (f *Faults) owned(ctx context.Context) map[string]int {
	per := map[string]int{}
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	snaps, _, err := f.c.store.List(lctx, authority.ListOptions{Kind: keyspace.KindActor})
	cancel()
	if err == nil {
		for _, s := range snaps {
			if f.objects[s.Object.String()] {
				per[s.Record.Owner.ID]++
			}
		}
	}
	return per
}

// inRelocation finds a node that is the source (or target) of a relocation
// in flight, asking every node for up to 5 s; else the busiest node.
func (f *Faults) inRelocation(ctx context.Context, role string) (*Node, string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		nodes := slices.Clone(f.c.nodes)
		f.rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		for _, n := range nodes {
			if !n.proc.Alive() || n.stopped {
				continue
			}
			a, err := f.c.Admin(n.Address)
			if err != nil {
				continue
			}
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			r, err := a.ListRelocations(lctx, &pb.ListRelocationsRequest{})
			cancel()
			if err != nil {
				continue
			}
			for _, s := range r.GetRelocations() {
				if s.GetOutcome() == "" && s.GetRole() == role {
					return n, fmt.Sprintf("%s of relocation of %s (%s → %s, phase %s)", role, s.GetObject(), s.GetSource(), s.GetTarget(), s.GetPhase())
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return f.busiest(ctx), "no relocation in flight seen: the busiest node"
}

// revive restarts every node that stopped by itself during a fault: a node
// that could not confirm its lease in time (e.g. while its etcd member was
// killed) fences itself and exits; the run goes on with it restarted.
func (f *Faults) revive(ctx context.Context, kind string) error {
	var errs []error
	for _, n := range f.c.nodes {
		if n.proc.Alive() {
			continue
		}
		f.c.cfg.logf("chaos: %s@%d stopped by itself during %s (%v): restarting it", n.Name, n.Gen, kind, n.proc.Err())
		f.c.event(n, "exited")
		if err := f.c.restartNode(ctx, n, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// kill SIGKILLs n and restarts it.
func (f *Faults) kill(ctx context.Context, n *Node, why string) error {
	f.c.cfg.logf("chaos: SIGKILL %s@%d (%s)", n.Name, n.Gen, why)
	n.proc.Kill()
	f.c.event(n, "sigkill")
	killed := time.Now()
	if err := f.c.restartNode(ctx, n, nil); err != nil {
		return err
	}
	f.c.cfg.logf("chaos: %s serving again as generation %d, %v after SIGKILL", n.Name, n.Gen, time.Since(killed).Round(time.Millisecond))
	return nil
}

// pause SIGSTOPs n for d, SIGCONTs it, and settles it.
func (f *Faults) pause(ctx context.Context, n *Node, d time.Duration) error {
	f.c.cfg.logf("chaos: SIGSTOP %s@%d for %v (lease TTL %v)", n.Name, n.Gen, d, f.ttl())
	if err := n.proc.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	f.c.event(n, "sigstop")
	n.stopped = true
	sleep(ctx, d)
	if err := n.proc.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	f.c.event(n, "sigcont")
	n.stopped = false
	return f.settle(ctx, n)
}

// settle waits after a fault on n until n serves again under the same
// generation (it kept its lease), or, when it lost its lease, until it
// stopped by itself (a fenced owner never serves again): then it is
// restarted. A node that lost its lease and keeps running past 3 TTLs is
// left running (a bug the checkers must see); Heal kills it.
func (f *Faults) settle(ctx context.Context, n *Node) error {
	deadline := time.Now().Add(3*f.ttl() + 2*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if !n.proc.Alive() {
			f.c.cfg.logf("chaos: %s stopped by itself (%v): restarting it", n.Name, n.proc.Err())
			f.c.event(n, "exited")
			return f.c.restartNode(ctx, n, nil)
		}
		owns, err := f.c.owners(ctx)
		if err == nil {
			if o, ok := owns[n.Name]; ok && o.Generation == n.Gen && o.Descriptor.State == "serving" {
				f.c.cfg.logf("chaos: %s kept its lease (generation %d)", n.Name, n.Gen)
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n.proc.Alive() {
		f.c.cfg.logf("chaos: %s lost its lease (generation %d) and still runs", n.Name, n.Gen)
	}
	return nil
}

// failpoint restarts the busiest node with the failpoint spec armed, waits
// until it fired (and the node crashed, for a crash), then restarts it
// clean.
func (f *Faults) failpoint(ctx context.Context, spec string) error {
	name, action, _ := strings.Cut(spec, "=")
	n := f.busiest(ctx)
	f.c.cfg.logf("chaos: restarting %s with failpoint %s", n.Name, spec)
	// SIGKILL, not SIGTERM: a graceful stop is not the fault.
	n.proc.Kill()
	if err := f.c.restartNode(ctx, n, []string{"MESHLOC_FAILPOINTS=" + spec}); err != nil {
		return err
	}
	marker := "failpoint: " + name + " "
	deadline := time.Now().Add(30 * time.Second)
	for !n.proc.Printed(marker) {
		if time.Now().After(deadline) || ctx.Err() != nil || !n.proc.Alive() {
			f.c.cfg.logf("chaos: failpoint %s did not fire on %s (is meshnode built with -tags failpoints?)", spec, n.Name)
			n.proc.Kill()
			if err := f.c.restartNode(ctx, n, nil); err != nil {
				return err
			}
			return fmt.Errorf("failpoint %s did not fire in 30 s", spec)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(action, "crash") {
		// A sleep or pause passes (the point fires once: @N); the node
		// keeps running with the point spent.
		if d, ok := strings.CutPrefix(strings.Split(action, "@")[0], "sleep:"); ok {
			if dd, err := time.ParseDuration(d); err == nil {
				sleep(ctx, dd+time.Second)
			}
		}
		f.c.cfg.logf("chaos: failpoint %s fired on %s", spec, n.Name)
		return f.settle(ctx, n)
	}
	n.proc.Wait(5 * time.Second)
	f.c.cfg.logf("chaos: failpoint %s fired on %s; restarting it clean", spec, n.Name)
	return f.c.restartNode(ctx, n, nil)
}

// ParseKinds parses a comma-separated list of fault kinds; "all" is every
// kind the cluster can run plus "failpoint" when failpoints is set; "none"
// is no fault.
func (f *Faults) ParseKinds(s string, failpoints bool) ([]string, error) {
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		switch k {
		case "", "none":
		case "all":
			for _, a := range Kinds {
				if f.Need(a) == "" {
					out = append(out, a)
				}
			}
			if failpoints {
				out = append(out, Failpoint)
			}
		default:
			if why := f.Need(k); why != "" {
				return nil, errors.New(why)
			}
			out = append(out, k)
		}
	}
	return out, nil
}

// KindList is every known kind, sorted, for help texts.
func KindList() string {
	k := append(slices.Clone(Kinds), Failpoint, Failpoint+":<name>=<action>")
	sort.Strings(k)
	return strings.Join(k, ", ")
}
