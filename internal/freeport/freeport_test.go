package freeport

import "testing"

func TestGetNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := Get()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] || p < low || p >= low+blocks*size {
			t.Fatalf("port %d handed out twice or out of range", p)
		}
		seen[p] = true
	}
}
