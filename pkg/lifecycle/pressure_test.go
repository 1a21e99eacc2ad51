package lifecycle_test

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/lifecycle"
)

func TestPressure(t *testing.T) {
	for _, c := range []struct {
		l     lifecycle.Limits
		ld    lifecycle.Load
		level lifecycle.Level
		shed  int
	}{
		{lifecycle.Limits{}, lifecycle.Load{Objects: 1 << 30, Bytes: 1 << 40}, lifecycle.Under, 0},
		{lifecycle.Limits{MaxObjects: 1000}, lifecycle.Load{Objects: 900}, lifecycle.Under, 0},
		{lifecycle.Limits{MaxObjects: 1000}, lifecycle.Load{Objects: 950}, lifecycle.Soft, 50},
		{lifecycle.Limits{MaxObjects: 1000}, lifecycle.Load{Objects: 1000}, lifecycle.Hard, 100},
		{lifecycle.Limits{MaxBytes: 1000}, lifecycle.Load{Objects: 100, Bytes: 950}, lifecycle.Soft, 6},
		{lifecycle.Limits{MaxBytes: 1000}, lifecycle.Load{Objects: 100, Bytes: 2000}, lifecycle.Hard, 55},
		{lifecycle.Limits{MaxObjects: 1000, MaxBytes: 1000}, lifecycle.Load{Objects: 950, Bytes: 100}, lifecycle.Soft, 50},
		{lifecycle.Limits{MaxBytes: 1000}, lifecycle.Load{Objects: 0, Bytes: 5000}, lifecycle.Hard, 0},
	} {
		if got := c.l.Level(c.ld); got != c.level {
			t.Errorf("%+v at %+v: level %v, want %v", c.l, c.ld, got, c.level)
		}
		if got := c.l.Shed(c.ld); got != c.shed {
			t.Errorf("%+v at %+v: shed %d, want %d", c.l, c.ld, got, c.shed)
		}
	}
}

// TestJudgePressed: under memory pressure an object may sleep however
// recently it ran, if its type may sleep at all and nothing it holds would
// be lost.
func TestJudgePressed(t *testing.T) {
	f := lifecycle.Facts{Sleeps: true, Serving: true, Pressed: true}
	if got := lifecycle.Judge(f); got != lifecycle.Sleep {
		t.Fatalf("pressed, never idle, no bound: %q", got)
	}
	f.Sessions = 1
	if got := lifecycle.Judge(f); got != lifecycle.OpenSession {
		t.Fatalf("pressed with a session: %q", got)
	}
	if got := lifecycle.Judge(lifecycle.Facts{Serving: true, Pressed: true}); got != lifecycle.Never {
		t.Fatalf("pressed, a type that never sleeps: %q", got)
	}
}
