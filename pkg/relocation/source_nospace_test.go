package relocation

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// An intent the store refused for want of space (etcd's NOSPACE: the
// driver's read-back found it not written) aborts the relocation with that
// reason and resource_exhausted — not as "uncertain", nor as "the record
// changed before the intent".
func TestIntentRefusedForSpace(t *testing.T) {
	src := NewSource(SourceConfig{ID: simRelocID, DeadlineMs: 1 << 40, ChunkSize: 4})
	src.Start()
	full := wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "authority: etcd is out of space (NOSPACE alarm)")
	acts, err := src.Step(IntentResult{Err: fmt.Errorf("%w: the intent on actor/counter/c1 was not written", full)})
	if err != nil {
		t.Fatal(err)
	}
	f, ok := acts[len(acts)-1].(Finish)
	if !ok || f.Outcome != Aborted || f.Code != pb.Code_CODE_RESOURCE_EXHAUSTED ||
		!strings.HasPrefix(f.Message, "intent not written: ") || !strings.Contains(f.Message, "NOSPACE") {
		t.Fatalf("actions %v, want Finish aborted resource_exhausted naming NOSPACE", acts)
	}
}
