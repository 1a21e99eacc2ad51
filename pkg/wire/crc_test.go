package wire_test

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/wire"
)

func TestCRC32C(t *testing.T) {
	// The check value of CRC-32C (Castagnoli) over "123456789".
	if got := wire.CRC32C([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("CRC32C = %#x, want 0xe3069283", got)
	}
	b := []byte("a chunk of object state, checked in two pieces")
	if got, want := wire.UpdateCRC32C(wire.CRC32C(b[:17]), b[17:]), wire.CRC32C(b); got != want {
		t.Fatalf("continued CRC %#x, whole %#x", got, want)
	}
}
