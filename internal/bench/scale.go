package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshloc/meshloc/internal/embedetcd"
)

// The scale section (`meshctl bench --only scale`): what holds at the size
// users run — a node of 100,000 objects drained, its orphans recovered
// after a kill -9, first-call activations, an etcd that stays small under
// a long relocation storm, the cost of a relocation as the number of
// location caches grows, a new node joining a million records, and the
// memory of idle objects. Each part builds a cluster of its own (an
// embedded etcd in a directory of its own, nodes in this process or in
// processes of their own) and measures its baseline beside it on that
// cluster, so no part's leftovers weigh on another's figures.

// ScalePlan sizes the scale section.
type ScalePlan struct {
	// Objects is how many objects a node holds where one node's size is
	// the point: drained, recovered, activated, idle (100,000).
	Objects int
	// Storm is how long the relocation storm of the etcd part runs (10
	// minutes), and StormQuota the etcd quota it runs under (256 MiB).
	Storm      time.Duration
	StormQuota int64
	// Followers are the two numbers of location caches following every
	// record that the fan-out part compares (4 and 32).
	Followers [2]int
	// JoinRecords is how many records a new node's cache loads when it
	// joins (1,000,000).
	JoinRecords int
	// Settle is how long the memory part's node stays idle before its
	// resident set is read (130 s: past the de-duplication window and the
	// Go runtime's periodic collection).
	Settle time.Duration
	// NodeArgs are more flags of the node children of the memory and join
	// parts (a tiny test's shorter windows).
	NodeArgs []string
	// Parts, when not empty, runs only these parts (ScaleParts).
	Parts []string
}

// DefaultScale is the scale the figures are stated at.
func DefaultScale() ScalePlan {
	return ScalePlan{Objects: 100_000, Storm: 10 * time.Minute, StormQuota: 256 << 20,
		Followers: [2]int{4, 32}, JoinRecords: 1_000_000, Settle: 130 * time.Second}
}

// scalePart is one part of the scale section.
type scalePart struct {
	name string
	f    func(x *run, p ScalePlan) error
}

// scaleParts run in this order; each lives in scale_<name>.go.
var scaleParts = []scalePart{
	{"drain", (*run).scaleDrain}, // and the first-call activations it starts from
	{"recovery", (*run).scaleRecovery},
	{"memory", (*run).scaleMemory},
	{"join", (*run).scaleJoin},
	{"fanout", (*run).scaleFanout},
	{"etcd", (*run).scaleEtcd},
}

// ScaleParts names the parts of the scale section, in the order they run.
func ScaleParts() []string {
	names := make([]string, len(scaleParts))
	for i, p := range scaleParts {
		names[i] = p.name
	}
	return names
}

func (x *run) scale() error {
	p := x.cfg.Plan.Scale
	def := DefaultScale()
	if p.Objects <= 0 {
		p.Objects = def.Objects
	}
	if p.Storm <= 0 {
		p.Storm = def.Storm
	}
	if p.StormQuota <= 0 {
		p.StormQuota = def.StormQuota
	}
	if p.Followers[0] <= 0 || p.Followers[1] <= 0 {
		p.Followers = def.Followers
	}
	if p.JoinRecords <= 0 {
		p.JoinRecords = def.JoinRecords
	}
	if p.Settle <= 0 {
		p.Settle = def.Settle
	}
	for _, name := range p.Parts {
		if !slices.Contains(ScaleParts(), name) {
			return fmt.Errorf("bench: no scale part %q (parts: %s)", name, strings.Join(ScaleParts(), ", "))
		}
	}
	for _, part := range scaleParts {
		if len(p.Parts) > 0 && !slices.Contains(p.Parts, part.name) {
			continue
		}
		x.step("scale: %s", part.name)
		if err := part.f(x, p); err != nil {
			return fmt.Errorf("bench: scale %s: %w", part.name, err)
		}
		if err := x.ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// scaleCluster starts a part's own cluster: an embedded etcd member (its
// configuration changed by etcdTune when set) in a directory of the part's
// own under the run's, removed with it. Nodes join with startNode.
func (x *run) scaleCluster(part string, etcdTune func(*embedetcd.Config)) (*mesh, func(), error) {
	dir, err := os.MkdirTemp(x.dir, "scale-"+part+"-")
	if err != nil {
		return nil, nil, err
	}
	m, err := startEtcd(x.ctx, dir, false, etcdTune)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return m, func() { m.close(); os.RemoveAll(filepath.Clean(dir)) }, nil
}
