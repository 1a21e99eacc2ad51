package prefault

import "testing"

// The target's payload buffer is prefaulted (Linux) and otherwise a plain
// zeroed buffer of the asked length, at any length and alignment.
func TestAllocPayload(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 2 << 20, 3<<20 + 5} {
		b := Alloc(n)
		if len(b) != n {
			t.Fatalf("Alloc(%d): %d bytes", n, len(b))
		}
		for i := 0; i < n; i += 4093 {
			if b[i] != 0 {
				t.Fatalf("Alloc(%d): byte %d is %d", n, i, b[i])
			}
			b[i] = 1
		}
	}
}
