//go:build failpoints

package node_test

// Fault tests of the relocation driver (docs/design.md §4, §9): one named
// failpoint (internal/failpoint) per test, in-process nodes on a real etcd.
// Each test proves the invariants of §9 for its fault: every relocation ends
// completed or aborted (the source kept it) and says why, the object has one
// owner that serves it with its state intact, and no acknowledged call is
// lost or executed twice.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// relocateUnderLoad moves object from src to dst while a caller appends to
// it, and returns the relocation's status and the acknowledged appends.
func relocateUnderLoad(t *testing.T, c *client.Client, src, dst *node.Node, object string, timeout time.Duration) (*pb.RelocationStatus, *appender, []string) {
	t.Helper()
	a := startAppender(t, c, object, "x")
	time.Sleep(50 * time.Millisecond)
	st := waitRelocation(t, relocateAsync(src, object, node.RelocateOptions{Target: dst.Self().ID, Timeout: timeout}), 30*time.Second)
	time.Sleep(100 * time.Millisecond)
	return st, a, a.halt(t)
}

func wantOutcome(t *testing.T, st *pb.RelocationStatus, outcome string, code pb.Code) {
	t.Helper()
	if st.GetOutcome() != outcome || st.GetCode() != code {
		t.Fatalf("relocation ended %s %v (%s), want %s %v", st.GetOutcome(), st.GetCode(), st.GetMessage(), outcome, code)
	}
}

// A corrupted STATE chunk: the target's CRC32C check fails before anything is
// restored (DATA_LOST); the source preserves and reopens; the caller loses nothing.
func TestFaultCorruptChunk(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/corrupt"
	first := []string{"a", "b", "c"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.SourceChunkData, "corrupt@1")

	st, a, acked := relocateUnderLoad(t, c, src, dst, obj, 0)
	wantOutcome(t, st, "aborted", pb.Code_CODE_DATA_LOST)
	fm.serves(t, src, c, obj)
	checkList(t, c, obj, first, a, acked)
	hostsNothing(t, dst)
	if ta := targetAttempt(t, dst, obj, 5*time.Second); ta.GetOutcome() != "failed" || ta.GetCode() != pb.Code_CODE_DATA_LOST {
		t.Errorf("target attempt: %s %v (%s), want failed DATA_LOST", ta.GetOutcome(), ta.GetCode(), ta.GetMessage())
	}
	fm.checkOutcomeMetric(t, src, "source", "aborted")
	fm.checkOutcomeMetric(t, dst, "target", "failed")
	t.Logf("%d appends during the relocation; %s", len(acked), st.GetMessage())
}

// A draining target refuses PREPARE with SHUTTING_DOWN before staging
// anything (docs/design.md §4 step 4, §7; docs/seed-bugs.md bug 11); the source
// keeps serving; the target's refusal is counted as shutdown (bug 33).
func TestFaultDrainingTargetRefuses(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/drain"
	first := []string{"a", "b"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	dst.SetDraining(true)

	st, a, acked := relocateUnderLoad(t, c, src, dst, obj, 0)
	wantOutcome(t, st, "aborted", pb.Code_CODE_SHUTTING_DOWN)
	fm.serves(t, src, c, obj)
	checkList(t, c, obj, first, a, acked)
	hostsNothing(t, dst)
	ta := targetAttempt(t, dst, obj, 5*time.Second)
	if ta.GetOutcome() != "shutdown" || ta.GetCode() != pb.Code_CODE_SHUTTING_DOWN || ta.GetPhase() != "done" {
		t.Errorf("target attempt: %s %v in phase %s (%s), want shutdown SHUTTING_DOWN", ta.GetOutcome(), ta.GetCode(), ta.GetPhase(), ta.GetMessage())
	}
	fm.checkOutcomeMetric(t, src, "source", "aborted")
	fm.checkOutcomeMetric(t, dst, "target", "shutdown")
}

// The target restores too slowly: READY would come after the deadline. The
// target must answer DEADLINE_EXCEEDED (never READY) and drop its stage; the
// source preserves at its deadline and serves on with its state intact
// (docs/design.md §4 step 4; docs/seed-bugs.md bug 15).
func TestFaultDeadlineBeforeReady(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/deadline"
	first := []string{"a", "b"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.TargetBeforeReady, "sleep:1500ms")

	st, a, acked := relocateUnderLoad(t, c, src, dst, obj, time.Second)
	wantOutcome(t, st, "aborted", pb.Code_CODE_DEADLINE_EXCEEDED)
	fm.serves(t, src, c, obj)
	checkList(t, c, obj, first, a, acked)
	ta := targetAttempt(t, dst, obj, 5*time.Second)
	hostsNothing(t, dst)
	if ta.GetCode() != pb.Code_CODE_DEADLINE_EXCEEDED {
		t.Errorf("target attempt: %s %v (%s) after %dms, want DEADLINE_EXCEEDED: a restore that ends after the deadline must not answer READY",
			ta.GetOutcome(), ta.GetCode(), ta.GetMessage(), ta.GetEndedUnixMs()-ta.GetStartedUnixMs())
	}
	fm.checkOutcomeMetric(t, src, "source", "aborted")
}

// The commit transaction lands but its reply is lost: the target reads back
// exactly the planned record and recognises its commit (docs/design.md §3): the
// relocation completes and the target serves the object with its state.
func TestFaultCommitReplyLost(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/commitlost"
	first := []string{"a", "b"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.TargetAfterCommit, "error")

	st, a, acked := relocateUnderLoad(t, c, src, dst, obj, 0)
	wantOutcome(t, st, "completed", pb.Code_CODE_OK)
	fm.serves(t, dst, c, obj)
	if rec := fm.record(t, obj).Record; rec.ObjectGeneration != 1 || rec.AuthorityGeneration != 2 {
		t.Errorf("record after the commit: generations %d/%d, want 1/2", rec.ObjectGeneration, rec.AuthorityGeneration)
	}
	checkList(t, c, obj, first, a, acked)
	hostsNothing(t, src)
	if ta := targetAttempt(t, dst, obj, 5*time.Second); ta.GetOutcome() != "completed" {
		t.Errorf("target attempt: %s %v (%s), want completed", ta.GetOutcome(), ta.GetCode(), ta.GetMessage())
	}
	fm.checkOutcomeMetric(t, src, "source", "completed")
	fm.checkOutcomeMetric(t, dst, "target", "completed")
}

// sealScenario puts requests in every place of a source's mailbox at the
// seal: "c0" is an append of slow object that is still running when the seal
// comes; the appends of queued arrive while it runs, before the relocation
// starts (captured at the seal); those of after arrive after the seal
// (boundary). A value "v:MS" makes that append take MS milliseconds. Calls
// go out 60 ms apart, so they reach the owner in order. It returns the
// values in the order sent, their calls and the relocation.
func sealScenario(c *client.Client, src *node.Node, object string, queued, after []string, opts node.RelocateOptions) ([]string, []<-chan callResult, <-chan relocResult) {
	const gap = 60 * time.Millisecond
	slow := time.Duration(len(queued)+len(after)+3)*gap + 300*time.Millisecond
	send := func(v string) <-chan callResult {
		name, ms, ok := strings.Cut(v, ":")
		if ok {
			return launch(c, object, "append", name, ms)
		}
		return launch(c, object, "append", v)
	}
	order := []string{"c0"}
	calls := []<-chan callResult{launch(c, object, "append", "c0", fmt.Sprint(slow.Milliseconds()))}
	for _, v := range queued {
		time.Sleep(gap)
		order = append(order, strings.Split(v, ":")[0])
		calls = append(calls, send(v))
	}
	time.Sleep(gap)
	reloc := relocateAsync(src, object, opts)
	time.Sleep(gap + 20*time.Millisecond)
	for _, v := range after {
		order = append(order, strings.Split(v, ":")[0])
		calls = append(calls, send(v))
		time.Sleep(gap)
	}
	return order, calls, reloc
}

func length(t *testing.T, r callResult) int {
	t.Helper()
	if r.rep == nil {
		return -1
	}
	var v struct{ Length int }
	if err := json.Unmarshal(r.rep.Payload, &v); err != nil {
		t.Fatalf("append reply %q: %v", r.rep.Payload, err)
	}
	return v.Length
}

// The capture fails after the seal: the source preserves and reopens with
// its queue in the order accepted — the request in progress, the captured
// queue, then the requests that arrived after the seal — and answers them all.
func TestFaultCaptureFails(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/slowlist/capture"
	first := []string{"a", "b"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.SourceAfterSeal, "error")

	order, calls, reloc := sealScenario(c, src, obj, []string{"q1", "q2", "q3"}, []string{"d1", "d2"}, node.RelocateOptions{Target: dst.Self().ID})
	st := waitRelocation(t, reloc, 30*time.Second)
	for i, ch := range calls {
		if r := await(t, order[i], ch); length(t, r) != len(first)+i+1 {
			t.Errorf("%s answered length %d, want %d (run in the order accepted)", order[i], length(t, r), len(first)+i+1)
		}
	}
	wantOutcome(t, st, "aborted", pb.Code_CODE_INTERNAL)
	if items, want := readItems(t, c, obj), append(append([]string(nil), first...), order...); strings.Join(items, ",") != strings.Join(want, ",") {
		t.Errorf("items %q, want %q", items, want)
	}
	fm.serves(t, src, c, obj)
	hostsNothing(t, dst)
	if ta := relocationOf(dst, st.GetRelocationId(), "target"); ta != nil {
		t.Errorf("the target saw a PREPARE of a relocation whose capture failed: %v", ta)
	}
	fm.checkOutcomeMetric(t, src, "source", "aborted")
}

// Every reply relay from the target is lost while requests were captured and
// sent as DATA: each caller is answered by its source with UNAVAILABLE after
// RelayWait, retries with the same operation id, and gets the recorded reply
// from the target's de-duplication table: nothing lost, nothing run twice.
func TestFaultRelayLost(t *testing.T) {
	fm := startFaultMesh(t, 2, func(_ int, c *node.Config) { c.RelayWait = 500 * time.Millisecond })
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/slowlist/relay"
	first := []string{"a", "b"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.TargetBeforeRelay, "error")

	order, calls, reloc := sealScenario(c, src, obj, []string{"q1", "q2"}, []string{"d1", "d2"}, node.RelocateOptions{Target: dst.Self().ID})
	st := waitRelocation(t, reloc, 30*time.Second)
	wantOutcome(t, st, "completed", pb.Code_CODE_OK)
	for i, ch := range calls {
		r := await(t, order[i], ch)
		if length(t, r) != len(first)+i+1 {
			t.Errorf("%s answered length %d, want %d", order[i], length(t, r), len(first)+i+1)
		}
		if i > 0 && r.rep != nil && (!r.rep.Replayed || r.rep.Fence.Owner != dst.Self()) {
			t.Errorf("%s: replayed=%v by %s; want the target's de-duplication table to answer the retry", order[i], r.rep.Replayed, r.rep.Fence.Owner)
		}
	}
	if items, want := readItems(t, c, obj), append(append([]string(nil), first...), order...); strings.Join(items, ",") != strings.Join(want, ",") {
		t.Errorf("items %q, want %q", items, want)
	}
	if hits := fm.metricSum(t, dst, "meshloc_dedup_hits_total", nil); hits < 4 {
		t.Errorf("target answered %v retries from its de-duplication table, want >= 4", hits)
	}
	if ok := fm.metricSum(t, dst, "meshloc_replies_relayed_total", nil); ok != 0 {
		t.Errorf("%v relays sent although every relay was lost", ok)
	}
	fm.serves(t, dst, c, obj)
	fm.checkOutcomeMetric(t, src, "source", "completed")
	fm.checkOutcomeMetric(t, dst, "target", "completed")
}

// A target whose stage is done (here: committed after its fallback wait,
// the source being held before CUTOVER) ends its side of the relocation
// stream at once: stopping the target does not wait for the source to
// close the stream.
func TestFaultStopNotBlockedByFinishedStage(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/finished"
	fill(t, c, obj, "a")
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.SourceBeforeCutover, "sleep:3s@1")

	reloc := relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID})
	if ta := targetAttempt(t, dst, obj, 3*time.Second); ta.GetOutcome() != "completed" {
		t.Fatalf("target attempt %v", ta)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dst.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("stopping the target took %v: its finished relocation stream was held open until the source, asleep, "+
			"closed it (targetRun.run waits for its receive goroutine, blocked in stream.Recv, before the handler returns)", took.Round(time.Millisecond))
	}
	st := waitRelocation(t, reloc, 15*time.Second)
	wantOutcome(t, st, "completed", pb.Code_CODE_OK)
}

// The target is stuck before its commit past the deadline (after READY and
// CUTOVER): the source, settling, preserves at its deadline and reopens; the
// target's late commit then fails on the store version the preserve bumped,
// and it discards its stage (docs/design.md §3: exactly one of commit and
// preserve wins). Every attempt ends promptly: the source's settle reads stop
// with the relocation (repeated, since the end of settling races with the
// watch event of the preserve).
func TestFaultLateCommitLosesToPreserve(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/latecommit"
	first := []string{"a", "b"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.TargetBeforeCommit, "sleep:1200ms")

	a := startAppender(t, c, obj, "x")
	for round := range 4 {
		st := waitRelocation(t, relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID, Timeout: 800 * time.Millisecond}), 10*time.Second)
		wantOutcome(t, st, "aborted", pb.Code_CODE_DEADLINE_EXCEEDED)
		if ta := targetAttempt(t, dst, obj, 5*time.Second); round == 0 && (ta.GetOutcome() != "failed" || ta.GetCode() != pb.Code_CODE_STALE_FENCE) {
			t.Errorf("target attempt: %s %v (%s), want failed STALE_FENCE (its late commit lost)", ta.GetOutcome(), ta.GetCode(), ta.GetMessage())
		}
		deadline := time.Now().Add(5 * time.Second)
		for dst.Hosted() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	acked := a.halt(t)
	fm.serves(t, src, c, obj)
	checkList(t, c, obj, first, a, acked)
	hostsNothing(t, dst)
}

// The caller of a relocation gives up (its RPC is cancelled) while the
// source settles, the target stuck before its commit: the relocation
// still ends by its own rules (here a preserve at its deadline, the
// object reopened), not as a shutdown that would leave the object held on
// a live node, its calls and sessions waiting until it restarted.
func TestFaultCallerGivesUpWhileSettling(t *testing.T) {
	fm := startFaultMesh(t, 2)
	c := newClient(t, client.Config{Etcd: fm.etcd})
	const obj = "actor/list/callergone"
	first := []string{"a", "b"}
	fill(t, c, obj, first...)
	src := fm.owner(t, obj)
	dst := fm.other(t, src)
	arm(t, failpoint.TargetBeforeCommit, "sleep:1500ms@1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan relocResult, 1)
	go func() {
		st, err := src.Relocate(ctx, obj, node.RelocateOptions{Target: dst.Self().ID, Timeout: time.Second})
		done <- relocResult{st, err}
	}()
	// Past the cutover (the target waits in its commit), then the caller goes.
	time.Sleep(400 * time.Millisecond)
	cancel()
	st := waitRelocation(t, done, 15*time.Second)
	wantOutcome(t, st, "aborted", pb.Code_CODE_DEADLINE_EXCEEDED)
	fm.serves(t, src, c, obj)
	checkList(t, c, obj, first, nil, nil)
}

// The source's stream breaks while the target assembles (the source died,
// or its connection did): the target ends its attempt at once, failed
// UNAVAILABLE with nothing staged — not at the relocation's deadline.
// Repeated, since the stream's end races with the cancellation of its
// context.
func TestFaultSourceStreamBrokenMidAssembly(t *testing.T) {
	fm := startFaultMesh(t, 1)
	n := fm.nodes[0]
	rid := fm.routingID(t, n)
	for i := range 8 {
		object := fmt.Sprintf("actor/list/broken%d", i)
		p := rawPrepare(n, rid[:], object, "list", make([]byte, 2048), time.Now().Add(10*time.Second))
		p.ChunkCount = 2
		ctx, cancel := context.WithCancel(context.Background())
		s, err := rpcpb.NewPeerServiceClient(dial(t, n)).Relocate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Prepare{Prepare: p}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: p.GetRelocationId(), Index: 0, Data: make([]byte, 1024)}}}); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, n, object, "target", "assembling", 2*time.Second) // the attempt exists
		cancel()
		broken := time.Now()
		ta := targetAttempt(t, n, object, 12*time.Second)
		if took := time.Since(broken); took > time.Second || ta.GetCode() != pb.Code_CODE_UNAVAILABLE {
			t.Fatalf("attempt %d ended %v after its stream broke: %s %v (%s); want failed UNAVAILABLE at once "+
				"(targetRun.run's receive goroutine drops StreamBroken when the stream context is already canceled)",
				i, took.Round(time.Millisecond), ta.GetOutcome(), ta.GetCode(), ta.GetMessage())
		}
	}
	hostsNothing(t, n)
}
