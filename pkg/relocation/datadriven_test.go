package relocation

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// TestTranscripts runs testdata/*.txt: each file is one relocation between a
// Source and a Target machine, driven step by step (sim_test.go). They are
// the specification of the protocol's behaviour; `go test ./pkg/relocation
// -rewrite` regenerates the expected output (datadriven's own flag).
//
// Commands:
//
//	relocate [deadline=MS] [chunk=BYTES] [fallback=MS] [members=N] [join] [maxahead=MS] [eager=BYTES] [precopy=BYTES] [bulk]
//	    owners s1 and t1, actor/counter/c1 owned by s1; the source starts.
//	    members=N: it moves group/g1 (owned by s1) with members
//	    actor/counter/m0…; join: actor/counter/c1 joins group/g1, owned by
//	    t1 (Actor Join). The store line then lists the other records.
//	    maxahead: the target allows deadlines at most that far ahead.
//	    bulk: a bulk unit under the one-write rule (its intent in
//	    relocations/bulk1, written by "result source bulkintent").
//	result source intent|preserve|bulkintent [ok|fails|uncertain [applied]]
//	result source capture [ok|fails] [size=BYTES] [changed=(I, …)]
//	    changed: after a pre-copy, those chunks differ from the snapshot.
//	result source snapshot [ok|fails] [size=BYTES]   a pre-copy's base
//	result source boundary [count=N]
//	result source settle [err]     completes the source's ReadSettle
//	observe                   the source's cache shows the record now (Observed)
//	result target restore [ok|err]
//	result target readgroup [ok|err]
//	result target commit [ok|fails|uncertain [applied]]
//	result target resolve [ok|err]
//	    completes the side's pending I/O. Writes run the fake store's
//	    compare-and-swap; ok / fails state what the compare must decide.
//	deliver to=target|source [n=K] [drop=SEL] [dup=SEL] [corrupt=SEL] [reorder] [unlist=(I, …)]
//	    delivers the first K (all) frames in flight to the side. SEL is a
//	    1-based position in that batch or a frame kind (READY, STATE, …),
//	    several as (a, b). reorder reverses the order of the STATE chunks.
//	    unlist removes chunk indexes from a SEALED frame's changed list.
//	tick now=MS
//	crash source|target       the side stops; its stream breaks.
//	stop source|target        the node stops (Stop).
//	drain target              the target's node drains from now on.
//	expire owner=ID           owners/ID is deleted (its lease ended).
//	restart owner=ID          the node restarts: a new owner generation.
//	move owner=ID             a later commit moved the object to ID.
//	recover owner=ID          the object was re-created on ID (object generation+1).
//	inject to=target prepare [deadline=MS]   a PREPARE with other bytes.
//	forge KIND                a copy of the source's PREPARE, altered by KIND
//	    (nonce, unintended, target-node, deadline, coordinator; a bulk
//	    unit's: store-version, bulk-id), is given to
//	    a fresh target machine of the same node; it prints what that
//	    machine answers (the simulated relocation is unchanged).
//	resend to=target|source KIND   the last KIND frame sent goes in flight again.
//	break-stream              the stream breaks; both sides see StreamBroken.
//	abort-bulk                relocations/bulk1 is deleted (the whole-bulk abort).
//	land-commit               the target's earlier uncertain commit lands now.
//	replay to=target|source   every frame ever sent to the side, again.
//
// Every step prints the actions (one per line), the phases, the store and
// the frames in flight; a broken invariant of design.md §9 prints VIOLATION
// and fails the test.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			var s *sim
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				var out strings.Builder
				if d.Cmd != "relocate" && s == nil {
					d.Fatalf(t, "relocate first")
				}
				if s != nil {
					s.out = &out
				}
				switch d.Cmd {
				case "relocate":
					cfg := simConfig{DeadlineMs: 1000, ChunkSize: 4, FallbackMs: 200}
					d.MaybeScanArgs(t, "deadline", &cfg.DeadlineMs)
					d.MaybeScanArgs(t, "chunk", &cfg.ChunkSize)
					d.MaybeScanArgs(t, "fallback", &cfg.FallbackMs)
					d.MaybeScanArgs(t, "members", &cfg.Members)
					d.MaybeScanArgs(t, "maxahead", &cfg.MaxDeadlineMs)
					d.MaybeScanArgs(t, "eager", &cfg.EagerMaxBytes)
					d.MaybeScanArgs(t, "precopy", &cfg.PrecopyMinBytes)
					cfg.Join = d.HasArg("join")
					cfg.Bulk = d.HasArg("bulk")
					s = newSim(cfg, &out)
					s.allowProtoE = true
					s.start()
				case "result":
					runResult(t, d, s)
				case "deliver":
					runDeliver(t, d, s)
				case "tick":
					var now int64
					d.ScanArgs(t, "now", &now)
					s.tick(now)
				case "crash":
					s.crash(sideArg(t, d))
				case "stop":
					s.step(sideArg(t, d), Stop{Hard: d.HasArg("hard")})
				case "drain":
					s.draining = true
					s.step(onTarget, Tick{NowMs: s.now, Draining: true})
				case "expire":
					var id string
					d.ScanArgs(t, "owner", &id)
					s.expire(id)
				case "restart":
					var id string
					d.ScanArgs(t, "owner", &id)
					for _, on := range []side{onSource, onTarget} {
						if s.ownerOf(on).ID == id && !s.dead[on] {
							s.crash(on)
						}
					}
					s.store.expire(id)
					s.store.addOwner(id)
					s.ownerChanged(id)
				case "move", "recover":
					var id string
					d.ScanArgs(t, "owner", &id)
					o := s.store.owner(id)
					if o.Generation == 0 {
						o = s.store.addOwner(id)
					}
					rec := s.store.rec.Record
					rec.Owner, rec.Node, rec.State, rec.Intent = o, simNode(id), record.StateActive, nil
					rec.AuthorityGeneration++
					if d.Cmd == "recover" {
						rec.ObjectGeneration++
						s.store.recreated = true
					}
					s.store.put(rec)
					s.store.foreign = true
					s.storeChanged()
				case "observe":
					// The source's location cache shows the record as it is
					// now (a watch event): delivered as Observed.
					s.printf("source ← observed: %s\n", s.store)
					s.observe()
				case "inject":
					runInject(t, d, s)
				case "forge":
					runForge(t, d, s)
				case "resend":
					// A retransmission (a peer that resends PREPARE or its
					// cutover frames): the last frame of KIND sent to the side
					// goes in flight again.
					to := toArg(t, d)
					kind := strings.ToUpper(d.CmdArgs[1].Key)
					for i := len(s.sent[to]) - 1; i >= 0; i-- {
						if frameName(s.sent[to][i]) == kind {
							s.inflight[to] = append(s.inflight[to], s.sent[to][i])
							break
						}
					}
				case "land-commit":
					// An earlier commit attempt of the target, whose RPC
					// failed, is applied by etcd only now.
					c, ok := s.pending[onTarget].(Commit)
					if !ok {
						d.Fatalf(t, "the target has no Commit pending")
					}
					if s.store.commit(c, s.tgtID).Committed {
						s.storeChanged()
						s.printf("  etcd: the earlier commit lands at sv=%d\n", s.store.rec.StoreVersion)
					}
				case "abort-bulk":
					// The whole-bulk abort: the source deletes the bulk's key.
					if s.store.deleteBulk(simBulkID) {
						s.printf("  etcd: relocations/%s deleted\n", simBulkID)
					}
				case "break-stream":
					// The stream breaks; both sides live on.
					s.inflight = [2][]*pb.RelocationFrame{}
					s.broken = true
					s.step(onSource, StreamBroken{Err: errors.New("stream reset")})
					s.step(onTarget, StreamBroken{Err: errors.New("stream reset")})
				case "replay":
					to := toArg(t, d)
					for _, f := range slices.Clone(s.sent[to]) {
						s.printf("%s ← %s (late)\n", to, describeFrame(f))
						s.deliver(to, f)
					}
				default:
					d.Fatalf(t, "unknown command %q", d.Cmd)
				}
				s.printState()
				if len(s.violations) > 0 {
					t.Errorf("%s: %s", d.Pos, strings.Join(s.violations, "; "))
					s.violations = nil
				}
				return out.String()
			})
		})
	}
}

func (s *sim) ownerOf(on side) record.OwnerRef {
	if on == onSource {
		return s.self
	}
	return s.tgtID
}

func sideArg(t *testing.T, d *datadriven.TestData) side {
	switch {
	case d.HasArg("source"):
		return onSource
	case d.HasArg("target"):
		return onTarget
	}
	d.Fatalf(t, "%s needs source or target", d.Cmd)
	return 0
}

func toArg(t *testing.T, d *datadriven.TestData) side {
	var to string
	d.ScanArgs(t, "to", &to)
	switch to {
	case "source":
		return onSource
	case "target":
		return onTarget
	}
	d.Fatalf(t, "to=%s", to)
	return 0
}

func runResult(t *testing.T, d *datadriven.TestData, s *sim) {
	if len(d.CmdArgs) < 2 {
		d.Fatalf(t, "result SIDE KIND …")
	}
	on := sideArg(t, d)
	kind := d.CmdArgs[1].Key
	want := map[string]string{
		"intent": "WriteIntent", "capture": "Seal", "snapshot": "Snapshot", "boundary": "SendBoundary", "preserve": "Preserve",
		"restore": "Restore", "readgroup": "ReadGroup", "commit": "Commit", "resolve": "ResolveCommit", "settle": "",
		"bulkintent": "AwaitBulkIntent",
	}
	name, ok := want[kind]
	if !ok {
		d.Fatalf(t, "unknown result %q", kind)
	}
	if kind == "settle" {
		if on != onSource || !s.readable() {
			s.printf("  (the source awaits no settle read)\n")
			return
		}
		s.printf("source ← settle read: %s\n", s.store)
		var err error
		if d.HasArg("err") {
			err = errUncertain
		}
		s.settleRead(err)
		return
	}
	if p := s.pending[on]; p == nil || actionName(p) != name {
		d.Fatalf(t, "the %s does not await %s (pending: %v)", on, name, s.pending[on])
	}
	k := resOK
	switch {
	case d.HasArg("uncertain") && d.HasArg("applied"):
		k = resUncertainWrote
	case d.HasArg("uncertain"):
		k = resUncertain
	case d.HasArg("err") || (d.HasArg("fails") && (kind == "capture" || kind == "restore")):
		k = resFail
	}
	n := 0
	switch kind {
	case "capture", "snapshot":
		n = 10
		d.MaybeScanArgs(t, "size", &n)
		if arg, ok := d.Arg("changed"); ok {
			for _, v := range arg.Vals {
				c, err := strconv.Atoi(v)
				if err != nil {
					d.Fatalf(t, "changed=%s", v)
				}
				s.changeChunks = append(s.changeChunks, c)
			}
		}
	case "boundary":
		d.MaybeScanArgs(t, "count", &n)
	}
	s.printf("%s ← %s result\n", on, kind)
	wrote := s.complete(on, k, n)
	if kind == "intent" || kind == "preserve" || kind == "commit" {
		if (d.HasArg("ok") && !wrote) || (d.HasArg("fails") && wrote) {
			s.violate("the transcript expected the %s to %s", kind, map[bool]string{true: "succeed", false: "fail"}[d.HasArg("ok")])
		}
	}
}

// selector matches frames of a batch by 1-based position or kind.
func selector(t *testing.T, d *datadriven.TestData, key string) func(i int, f *pb.RelocationFrame) bool {
	arg, ok := d.Arg(key)
	if !ok {
		return func(int, *pb.RelocationFrame) bool { return false }
	}
	return func(i int, f *pb.RelocationFrame) bool {
		for _, v := range arg.Vals {
			if n, err := strconv.Atoi(v); err == nil {
				if n == i+1 {
					return true
				}
			} else if strings.EqualFold(v, frameName(f)) {
				return true
			}
		}
		return false
	}
}

func runDeliver(t *testing.T, d *datadriven.TestData, s *sim) {
	to := toArg(t, d)
	batch := s.inflight[to]
	if d.HasArg("n") {
		var n int
		d.ScanArgs(t, "n", &n)
		batch = batch[:min(n, len(batch))]
	}
	s.inflight[to] = slices.Clone(s.inflight[to][len(batch):])
	batch = slices.Clone(batch)
	if d.HasArg("reorder") {
		var idx []int
		for i, f := range batch {
			if f.GetChunk() != nil {
				idx = append(idx, i)
			}
		}
		for l, r := 0, len(idx)-1; l < r; l, r = l+1, r-1 {
			batch[idx[l]], batch[idx[r]] = batch[idx[r]], batch[idx[l]]
		}
	}
	drop, dup, corrupt := selector(t, d, "drop"), selector(t, d, "dup"), selector(t, d, "corrupt")
	for i, f := range batch {
		note := ""
		if corrupt(i, f) && f.GetChunk() != nil {
			f = cloneFrame(f)
			f.GetChunk().Data[0] ^= 0xff
			note = " (corrupted)"
		}
		if arg, ok := d.Arg("unlist"); ok && f.GetSealed() != nil {
			// A delta that leaves a changed chunk out of SEALED's list.
			f = cloneFrame(f)
			sl := f.GetSealed()
			for _, v := range arg.Vals {
				sl.Changed = slices.DeleteFunc(sl.Changed, func(c uint32) bool { return strconv.Itoa(int(c)) == v })
			}
			note = " (chunks unlisted)"
		}
		if drop(i, f) {
			s.printf("%s ✗ %s (dropped)\n", to, describeFrame(f))
			continue
		}
		times := 1
		if dup(i, f) {
			times = 2
		}
		for range times {
			if s.dead[to] {
				s.printf("%s ✗ %s (crashed)\n", to, describeFrame(f))
				continue
			}
			s.printf("%s ← %s%s\n", to, describeFrame(f), note)
			s.deliver(to, f)
		}
	}
}

func runInject(t *testing.T, d *datadriven.TestData, s *sim) {
	to := toArg(t, d)
	switch {
	case to == onTarget && d.HasArg("prepare"):
		p := s.src.Prepare()
		if p == nil {
			d.Fatalf(t, "the source sent no PREPARE yet")
		}
		q := cloneFrame(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Prepare{Prepare: p}})
		deadline := p.GetDeadlineUnixMs() + 1
		d.MaybeScanArgs(t, "deadline", &deadline)
		q.GetPrepare().DeadlineUnixMs = deadline
		s.printf("target ← %s (other bytes, same id)\n", describeFrame(q))
		s.deliver(onTarget, q)
	default:
		d.Fatalf(t, "inject: unknown frame %s", fmt.Sprint(d.CmdArgs))
	}
}

// runForge: a hostile peer's PREPARE, built from the real one (everything
// public: the record with its intent, the store version), reaches a fresh
// target machine before the real one does.
func runForge(t *testing.T, d *datadriven.TestData, s *sim) {
	p := s.src.Prepare()
	if p == nil {
		d.Fatalf(t, "the source sent no PREPARE yet")
	}
	q := cloneFrame(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Prepare{Prepare: p}}).GetPrepare()
	kind := d.CmdArgs[0].Key
	switch kind {
	case "nonce": // the attacker does not know the nonce
		q.Nonce = []byte("fedcba9876543210")
	case "unintended": // the record as it was before the intent
		r := q.Participants[0]
		rec, err := record.DecodeRecord(r.Record)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		rec.State, rec.Intent = record.StateActive, nil
		r.Record = rec.Encode()
	case "target-node": // the intent names another process of this owner id
		q.Target.RoutingId = bytes.Repeat([]byte{'x'}, 16)
	case "deadline":
		q.DeadlineUnixMs += 5000
	case "coordinator": // another node claims to be the source
		q.Coordinator.RoutingId = bytes.Repeat([]byte{'m'}, 16)
	case "store-version": // a bulk unit at another version than its bulk names
		q.Participants[0].StoreVersion++
		q.Coordinator.StoreVersion++
	case "bulk-id": // a bulk whose key etcd does not hold
		q.BulkId = "bulk9"
	default:
		d.Fatalf(t, "forge: unknown kind %q", kind)
	}
	tgt := NewTarget(s.tgt.cfg)
	acts, err := tgt.Step(PrepareEvent{Prepare: q, NowMs: s.now, Bulk: s.store.readBulk(q.GetBulkId())})
	s.printf("forged target ← PREPARE (%s)\n", kind)
	if err != nil {
		s.printf("  forged target: error: %v\n", err)
	}
	for _, a := range acts {
		switch a := a.(type) {
		case Send:
			s.printf("  forged target: Send %s\n", describeFrame(a.Frame))
		case Finish:
			s.printf("  forged target: Finish %s code=%s\n", a.Outcome, a.Code)
		default:
			s.printf("  forged target: %s\n", actionName(a))
		}
	}
	s.printf("  forged target phase: %s\n", tgt.Phase())
}
