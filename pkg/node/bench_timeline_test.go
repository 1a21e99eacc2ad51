package node_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// BenchmarkRelocationTimeline moves one counter back and forth between two
// nodes, one relocation at a time, and reports the p50 of each step of
// both sides' timelines (what the interruption is made of) beside an etcd
// CAS run before each move on the same etcd:
//
//	go test -run '^$' -bench RelocationTimeline -benchtime 400x ./pkg/node/
//
// source-seal-us is the source's seal until its STATE was sent;
// seal-to-target-us, the seal until the target's stage began (its PREPARE,
// which a small object's state travels with); target-state-us, the
// PREPARE's checks and the assembly until the restore; target-ready-us,
// the restore; target-commit-us, the commit transaction until admission.
func BenchmarkRelocationTimeline(b *testing.B) {
	m := startMesh(b, 2)
	ctx := context.Background()
	c := newClient(b, client.Config{Etcd: m.etcd})
	const name = "actor/counter/timeline"
	if _, err := c.Call(ctx, name, "add", "1"); err != nil {
		b.Fatal(err)
	}
	put, err := m.etcd.Put(ctx, "/bench/timeline-cas", "0")
	if err != nil {
		b.Fatal(err)
	}
	rev := put.Header.Revision
	steps := map[string][]time.Duration{}
	for b.Loop() {
		t0 := time.Now()
		tr, err := m.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("/bench/timeline-cas"), "=", rev)).
			Then(clientv3.OpPut("/bench/timeline-cas", "1")).Commit()
		if err != nil || !tr.Succeeded {
			b.Fatalf("CAS: %v", err)
		}
		rev = tr.Header.Revision
		steps["cas"] = append(steps["cas"], time.Since(t0))
		src := m.owner(b, name)
		st, err := src.Relocate(ctx, name, node.RelocateOptions{})
		if err != nil || st.GetOutcome() != "completed" {
			b.Fatalf("relocation: %v %v", err, st)
		}
		dst := m.owner(b, name)
		s, t := statusOf(src, st.GetRelocationId()), statusOf(dst, st.GetRelocationId())
		if s == nil || t == nil {
			b.Fatal("a side does not list the relocation")
		}
		at := func(r *pb.RelocationStatus, step string) int64 {
			for _, mk := range r.GetTimeline() {
				if mk.GetStep() == step {
					return mk.GetUnixUs()
				}
			}
			return 0
		}
		us := func(k string, from, to int64) {
			if from > 0 && to > 0 {
				steps[k] = append(steps[k], time.Duration(to-from)*time.Microsecond)
			}
		}
		us("source-seal", at(s, "seal"), at(s, "state"))
		us("seal-to-target", at(s, "seal"), at(t, "state"))
		us("target-state", at(t, "state"), at(t, "ready"))
		us("target-ready", at(t, "ready"), at(t, "commit"))
		us("target-commit", at(t, "commit"), at(t, "admission"))
		steps["interruption"] = append(steps["interruption"], time.Duration(t.GetInterruptionUs())*time.Microsecond)
	}
	for k, v := range steps {
		slices.Sort(v)
		b.ReportMetric(float64(v[len(v)/2].Microseconds()), k+"-us")
	}
}

// statusOf is n's entry for relocation id once it ended (the target's may
// end a moment after the source's answer).
func statusOf(n *node.Node, id []byte) *pb.RelocationStatus {
	for range 1000 {
		for _, r := range n.Relocations() {
			if bytes.Equal(r.GetRelocationId(), id) && r.GetOutcome() != "" {
				return r
			}
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
