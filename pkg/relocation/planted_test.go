package relocation

import (
	"bytes"
	"errors"
	"testing"

	"github.com/meshloc/meshloc/internal/failpoint"
)

// The planted bug crc-ignored (failpoints builds only) makes Payload return
// a payload whose CRC32C differs from the manifest; correct code never does
// (TestAssemblyCRCMismatchNeverYieldsPayload).
func TestAssemblyCRCIgnoredPlanted(t *testing.T) {
	payload := simPayload(10)
	m := PlanChunks(payload, 4)
	assemble := func() ([]byte, error) {
		a, _ := NewAssembly(m)
		for i, p := range chunksOf(payload, m) {
			if i == 1 {
				p = append([]byte(nil), p...)
				p[0] ^= 0x01
			}
			if err := a.Add(uint32(i), p); err != nil {
				t.Fatal(err)
			}
		}
		return a.Payload()
	}
	if got, err := assemble(); !errors.Is(err, ErrDataLost) || got != nil {
		t.Fatalf("correct: payload %q, %v; want ErrDataLost", got, err)
	}
	if !failpoint.Enabled {
		t.Skip("planting needs -tags failpoints")
	}
	defer failpoint.Plant(failpoint.BugCRCIgnored)()
	got, err := assemble()
	if err != nil || len(got) != len(payload) || bytes.Equal(got, payload) {
		t.Fatalf("planted: payload of %d bytes (equal to the original: %v), %v; want the corrupted payload installed",
			len(got), bytes.Equal(got, payload), err)
	}
}
