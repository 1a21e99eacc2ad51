//go:build failpoints

package failpoint

import (
	"errors"
	"fmt"
	"testing"
)

// hits runs Hit n times at name and returns the 1-based hits that fired.
func hits(name string, n int) []int {
	var fired []int
	for i := 1; i <= n; i++ {
		if errors.Is(Hit(name), ErrInjected) {
			fired = append(fired, i)
		}
	}
	return fired
}

func TestHitSchedules(t *testing.T) {
	defer Reset()
	for _, tc := range []struct {
		action string
		want   []int
	}{
		{"error", []int{1, 2, 3, 4, 5, 6, 7}},
		{"error@3", []int{3}},
		{"error%3", []int{3, 6}},
		{"error%1", []int{1, 2, 3, 4, 5, 6, 7}},
	} {
		Reset()
		if err := Enable("test.point", tc.action); err != nil {
			t.Fatalf("%s: %v", tc.action, err)
		}
		if got := hits("test.point", 7); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: fired at hits %v, want %v", tc.action, got, tc.want)
		}
	}
}

func TestEnableRefusesBadSchedules(t *testing.T) {
	defer Reset()
	for _, a := range []string{"error%0", "error%-2", "error%x", "error%", "error@0", "error@2%3", "sleep:1s%", "bogus%2"} {
		if err := Enable("test.point", a); err == nil {
			t.Errorf("Enable(%q) accepted", a)
		}
	}
	if err := Enable("test.point", "sleep:1ms%2"); err != nil {
		t.Errorf("sleep with a period: %v", err)
	}
}

func TestCorruptFlipsTheLowBitOfTheLastDigit(t *testing.T) {
	defer Reset()
	if err := Enable("test.data", "corrupt%2"); err != nil {
		t.Fatal(err)
	}
	in := `{"v":1,"items":["c1-38","c1-39"]}`
	if got := Corrupt("test.data", []byte(in)); string(got) != in {
		t.Errorf("hit 1 of corrupt%%2 changed the data: %s", got)
	}
	b := []byte(in)
	got := Corrupt("test.data", b)
	if string(b) != in {
		t.Fatalf("Corrupt changed its input: %s", b)
	}
	if want := `{"v":1,"items":["c1-38","c1-38"]}`; string(got) != want {
		t.Errorf("hit 2 of corrupt%%2: %s, want %s (last digit XOR 0x01)", got, want)
	}
	Reset()
	if err := Enable("test.data", "corrupt"); err != nil {
		t.Fatal(err)
	}
	if got, want := string(Corrupt("test.data", []byte("abcde"))), "abbde"; got != want {
		t.Errorf("no digit: %s, want %s (middle byte XOR 0x01)", got, want)
	}
}

func TestPlant(t *testing.T) {
	for _, b := range Bugs {
		if Planted(b) {
			t.Fatalf("%s planted before any Plant (MESHLOC_PLANT set?)", b)
		}
	}
	undo := Plant(BugCRCIgnored, "no-such-bug")
	if !Planted(BugCRCIgnored) || Planted(BugWokenOwnerServes) || Planted("no-such-bug") {
		t.Errorf("after Plant(crc-ignored): crc-ignored %v, woken-owner-serves %v, unknown %v",
			Planted(BugCRCIgnored), Planted(BugWokenOwnerServes), Planted("no-such-bug"))
	}
	inner := Plant(BugCRCIgnored)
	inner()
	if !Planted(BugCRCIgnored) {
		t.Error("an inner undo unplanted a bug an outer Plant still holds")
	}
	undo()
	undo() // idempotent
	if Planted(BugCRCIgnored) {
		t.Error("still planted after undo")
	}
	if !plants[BugCRCIgnored].logged.Load() {
		t.Error(`"planted: crc-ignored" was not logged`)
	}
}
