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

func TestCombineCRC32C(t *testing.T) {
	b := make([]byte, 70000)
	for i := range b {
		b[i] = byte(i*131 + i>>7)
	}
	for _, cut := range []int{0, 1, 7, 8, 9, 4095, 4096, 65537, len(b) - 1, len(b)} {
		a, c := b[:cut], b[cut:]
		if got, want := wire.CombineCRC32C(wire.CRC32C(a), wire.CRC32C(c), int64(len(c))), wire.CRC32C(b); got != want {
			t.Fatalf("cut %d: combined %#x, whole %#x", cut, got, want)
		}
	}
	// Three pieces, folded left to right.
	x, y, z := b[:100], b[100:5000], b[5000:]
	s := wire.CombineCRC32C(wire.CombineCRC32C(wire.CRC32C(x), wire.CRC32C(y), int64(len(y))), wire.CRC32C(z), int64(len(z)))
	if s != wire.CRC32C(b) {
		t.Fatal("three pieces do not combine to the whole")
	}
}

func BenchmarkCombineCRC32C(b *testing.B) {
	for i := range b.N {
		_ = wire.CombineCRC32C(uint32(i), 0x1234, 1<<20)
	}
}
