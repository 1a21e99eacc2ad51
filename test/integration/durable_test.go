package integration

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// stateLostCounter is the cluster as the verification suite sees it, with
// callers that count CODE_STATE_LOST answers.
type stateLostCounter struct {
	*chaos.Cluster
	n atomic.Int64
}

func (c *stateLostCounter) NewCaller(ctx context.Context) (verify.Caller, error) {
	cl, err := c.Cluster.NewCaller(ctx)
	if err != nil {
		return nil, err
	}
	return &countingCaller{Caller: cl, n: &c.n}, nil
}

type countingCaller struct {
	verify.Caller
	n *atomic.Int64
}

func (c *countingCaller) CallOp(ctx context.Context, op wire.OperationID, object, method string, args [][]byte) (*client.Reply, error) {
	r, err := c.Caller.CallOp(ctx, op, object, method, args)
	var we *wire.Error
	if errors.As(err, &we) && we.Code == pb.Code_CODE_STATE_LOST {
		c.n.Add(1)
	}
	return r, err
}

// TestDurableOwnerKilled: locationd and 3 meshnode processes; durable banks
// (dbank) and durable lists (dlist) under load from several callers, with
// the relocation storm; the owner of the most of them is killed (SIGKILL)
// twice and restarted. Checked by the verification suite (internal/verify):
// every acknowledged append is in the final reads, every bank sums to 800
// with every acknowledged transfer exactly once in its ledger, nothing
// executed twice (execution logs), one owner per fence (etcd audit) — and,
// unlike memory objects, no loss declared: 0 lost, 0 declared lost, no
// STATE_LOST answer at all.
func TestDurableOwnerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	bin := binary(t, "meshnode")
	ctx := context.Background()
	cl, err := chaos.Start(ctx, chaos.Config{BinDir: filepath.Dir(bin), WorkDir: t.TempDir(), Nodes: 3, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	const think = 3 * time.Millisecond
	bank := &verify.Bank{Type: "dbank", Prefix: "dur", N: 2, Think: think}
	list := &verify.List{Type: "dlist", Prefix: "dur", N: 4, Think: think}
	var objects []string
	for _, w := range []verify.Workload{bank, list} {
		objects = append(objects, w.Objects()...)
	}
	fm := cl.Faults(objects, 1)
	var faults []verify.Fault
	for _, at := range []time.Duration{4 * time.Second, 14 * time.Second} {
		f, err := fm.Fault(chaos.KillOwner, at)
		if err != nil {
			t.Fatal(err)
		}
		faults = append(faults, f)
	}
	c := &stateLostCounter{Cluster: cl}
	rep, err := verify.Run(ctx, verify.Config{
		Cluster:            c,
		Workloads:          []verify.Workload{bank, list},
		Streams:            3,
		Duration:           24 * time.Second,
		OpTimeout:          6 * time.Second,
		Relocations:        true,
		RelocationWorkers:  2,
		RelocationInterval: 50 * time.Millisecond,
		RelocationTimeout:  15 * time.Second,
		RelocationsMustEnd: true,
		Faults:             faults,
		ExecLogs:           cl,
		FinalTimeout:       time.Minute,
		Logf:               t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep.Text())
	if rep.Failed() {
		t.Errorf("the run found problems (above)")
	}
	if got := rep.Faults[chaos.KillOwner]; got != 2 {
		t.Errorf("%d owners killed, want 2", got)
	}
	for _, w := range rep.Workloads {
		t.Logf("%s: %d ops, %d acknowledged writes, lost %d, declared lost %d, duplicated %d",
			w.Workload, w.Ops, w.Acked, w.Lost, w.DeclaredLost, w.Duplicated)
		if w.Acked == 0 || w.Lost != 0 || w.DeclaredLost != 0 || w.Duplicated != 0 {
			t.Errorf("%s: acked %d lost %d declared lost %d duplicated %d; want acked > 0 and 0 lost",
				w.Workload, w.Acked, w.Lost, w.DeclaredLost, w.Duplicated)
		}
	}
	if n := c.n.Load(); n != 0 {
		t.Errorf("%d STATE_LOST answers for durable objects", n)
	}
	recovered := 0
	if rep.Audit != nil {
		for _, obj := range objects {
			recovered += len(rep.Audit.Recoveries[obj])
		}
	}
	t.Logf("%d recoveries of durable objects after the kills", recovered)
	if recovered == 0 {
		t.Errorf("no durable object was recovered from a killed owner: the run did not test what it claims")
	}
}
