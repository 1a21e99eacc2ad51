package relocation

import (
	"fmt"
	"testing"

	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// BenchmarkSourceTargetStep: one whole happy-path relocation through both
// machines — intent, seal, PREPARE, chunks, READY, two DATA, CUTOVER,
// commit, admit, OUTCOME, settle — with no I/O: the results the driver
// would get from etcd and the frames it would carry are prepared once, so
// the time and allocations are the machines' own (fingerprint, assembly,
// CRC32C included).
func BenchmarkSourceTargetStep(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("payload=%dKiB", size>>10), func(b *testing.B) {
			fx := newBenchFixture(size, 16<<10)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				fx.relocate(b)
			}
		})
	}
}

type benchFixture struct {
	src     SourceConfig
	tgt     TargetConfig
	payload []byte
	intent  WriteResult
	chunks  []Received
	data    []Received
	commit  CommitResult
	settle  SettleResult
}

func newBenchFixture(size, chunk int) *benchFixture {
	st := newFakeStore()
	self, tgt := st.addOwner("s1"), st.addOwner("t1")
	st.activate(simObject, self)
	fx := &benchFixture{payload: simPayload(size)}
	fx.src = SourceConfig{ID: simRelocID, Object: st.rec, Self: self, SelfRoutingID: simRID("s1"),
		Target: TargetRef{Owner: tgt, Node: simNode("t1")}, AppVersion: "v1", DeadlineMs: 1 << 40, ChunkSize: chunk, Nonce: simNonce}
	fx.tgt = TargetConfig{Self: tgt, SelfRoutingID: simRID("t1"), AppVersion: "v1", FallbackMs: 1000}

	wi := NewSource(fx.src).Start()[0].(WriteIntent)
	fx.intent = st.intend(wi, self)
	m := PlanChunks(fx.payload, chunk)
	for i := range m.Chunks {
		start, end := m.ChunkSpan(i)
		fx.chunks = append(fx.chunks, Received{Frame: &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{
			RelocationId: simRelocID[:], Index: i, Data: fx.payload[start:end]}}}})
	}
	var crc uint32
	for i := range 2 {
		req := simRequest(i)
		crc = wire.UpdateCRC32C(crc, RequestBytes(req))
		fx.data = append(fx.data, Received{Frame: &pb.RelocationFrame{Frame: &pb.RelocationFrame_Data{Data: &pb.Data{RelocationId: simRelocID[:], Sequence: uint32(i), Request: req}}}})
	}
	fx.data = append(fx.data, Received{Frame: &pb.RelocationFrame{Frame: &pb.RelocationFrame_Cutover{Cutover: &pb.Cutover{RelocationId: simRelocID[:], DataCount: 2, DataCrc32C: crc}}}})
	exp := fx.intent.Snapshot
	fx.commit = st.commit(Commit{RelocationID: simRelocID, Participants: []record.Snapshot{exp}}, tgt)
	fx.settle = SettleResult{View: st.view(self.ID)}
	return fx
}

func (fx *benchFixture) relocate(b *testing.B) {
	src, tgt := NewSource(fx.src), NewTarget(fx.tgt)
	step := func(m interface{ Step(Event) ([]Action, error) }, ev Event) []Action {
		acts, err := m.Step(ev)
		if err != nil {
			b.Fatal(err)
		}
		return acts
	}
	src.Start()
	step(src, IntentResult{Result: fx.intent})
	acts := step(src, Captured{Payload: fx.payload})
	step(tgt, PrepareEvent{Prepare: acts[0].(Send).Frame.GetPrepare(), NowMs: 1})
	for _, c := range fx.chunks {
		step(tgt, c)
	}
	ready := step(tgt, Restored{})[0].(Send)
	step(src, Received{Frame: ready.Frame})
	step(src, BoundarySent{Count: 2})
	for _, d := range fx.data {
		step(tgt, d)
	}
	out := step(tgt, fx.commit)
	step(src, Received{Frame: out[1].(Send).Frame})
	if acts := step(src, fx.settle); src.Outcome() != Completed || tgt.Outcome() != Completed || len(acts) != 2 {
		b.Fatalf("outcomes %s / %s", src.Outcome(), tgt.Outcome())
	}
}

// BenchmarkAssembly: the target's side of the payload alone — plan the
// chunks, add each, check the CRC32C of the whole — beside a bare CRC32C
// of the same bytes (the baseline it cannot beat: every byte is checked
// once).
func BenchmarkAssembly(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		payload := simPayload(size)
		m := PlanChunks(payload, 1<<20)
		b.Run(fmt.Sprintf("payload=%dMiB/assembly", size>>20), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				a, err := NewAssembly(m)
				if err != nil {
					b.Fatal(err)
				}
				for i := range m.Chunks {
					start, end := m.ChunkSpan(i)
					if err := a.Add(i, payload[start:end]); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := a.Payload(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("payload=%dMiB/crc32c-baseline", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				_ = wire.CRC32C(payload)
			}
		})
	}
}
