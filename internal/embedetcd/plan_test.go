package embedetcd

import (
	"testing"
	"time"
)

// t0 is the first round's time in the planner's timelines.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// at is the round of second sec of a timeline whose revision grows by 10 a
// second from 100.
func at(sec float64, inUse, quota int64) round {
	return round{now: t0.Add(time.Duration(sec * float64(time.Second))), rev: revAt(sec), size: inUse, inUse: inUse, quota: quota, leader: true}
}

func revAt(sec float64) int64 { return 100 + int64(sec*10) }

// run steps p through the seconds from..to (one round each), compacting
// and defragmenting as decided, and returns the compactions by second.
func run(p *planner, from, to int, r func(sec int) round) map[int]decision {
	out := map[int]decision{}
	for sec := from; sec <= to; sec++ {
		rd := r(sec)
		d := p.step(rd)
		if d.compact > 0 {
			p.didCompact(d.compact, rd.now)
		}
		if d.defrag {
			p.didDefrag(rd.now)
		}
		if d.compact > 0 || d.defrag {
			out[sec] = d
		}
	}
	return out
}

// The retention: the newest revision a minute old, every tenth of it
// (6 s); nothing before a minute has passed.
func TestPlanRetention(t *testing.T) {
	p := newPlanner(Maintenance{Retention: time.Minute})
	got := run(p, 0, 80, func(sec int) round { return at(float64(sec), 1<<20, DefaultQuotaBytes) })
	want := map[int]int64{60: revAt(0), 66: revAt(6), 72: revAt(12), 78: revAt(18)}
	if len(got) != len(want) {
		t.Fatalf("compactions at %v, want at %v", got, want)
	}
	for sec, rev := range want {
		if d := got[sec]; d.compact != rev || d.pressure != relaxed || d.defrag {
			t.Errorf("second %d: %+v, want a compaction at %d without pressure", sec, d, rev)
		}
	}
	if n := len(p.samples); n > 62 {
		t.Errorf("%d samples kept, want those of the last retention only (61)", n)
	}
	long := newPlanner(Maintenance{Retention: 24 * time.Hour})
	run(long, 0, 2*86400, func(sec int) round { return at(float64(sec), 1<<20, DefaultQuotaBytes) })
	if n := len(long.samples); n > 102 {
		t.Errorf("a retention of a day keeps %d samples, want about a hundred", n)
	}
}

// Only the leader compacts (compaction goes through raft: one is enough).
func TestPlanFollowerDoesNotCompact(t *testing.T) {
	p := newPlanner(Maintenance{Retention: time.Minute})
	got := run(p, 0, 200, func(sec int) round {
		r := at(float64(sec), 1<<30, 1<<30) // even under pressure
		r.leader = false
		return r
	})
	if len(got) != 0 {
		t.Fatalf("a follower decided %v", got)
	}
}

// Pressed (half the quota in use) every round halves the history kept,
// down to minRetention; in an emergency (five eighths, or NOSPACE) every
// round compacts at the current revision; then the retention rules again.
func TestPlanPressure(t *testing.T) {
	// t=20: history since 0 → keep 10 s; t=21: since 10 → 5.5 s; t=22:
	// since 15 → 5 s (the floor); then the floor each second.
	halves := map[int]int64{20: revAt(10), 21: revAt(15), 22: revAt(17), 23: revAt(18), 24: revAt(19)}
	all := map[int]int64{20: revAt(20), 21: revAt(21), 22: revAt(22), 23: revAt(23), 24: revAt(24)}
	for _, tc := range []struct {
		name    string
		inUse   int64
		noSpace bool
		level   pressure
		want    map[int]int64
	}{
		{"half the quota", 50 << 20, false, pressed, halves},
		{"five eighths", 63 << 20, false, emergency, all},
		{"under five eighths", 62 << 20, false, pressed, halves},
		{"nospace alarm", 1 << 20, true, emergency, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlanner(Maintenance{Retention: time.Minute})
			run(p, 0, 19, func(sec int) round { return at(float64(sec), 1<<20, 100<<20) })
			press := func(sec int) round {
				r := at(float64(sec), tc.inUse, 100<<20)
				r.noSpace = tc.noSpace
				return r
			}
			got := run(p, 20, 24, press)
			for sec, rev := range tc.want {
				if d := got[sec]; d.compact != rev || d.pressure != tc.level {
					t.Errorf("second %d: %+v, want a compaction at %d at pressure %d", sec, d, rev, tc.level)
				}
			}
			// Pressure over: nothing until the compaction interval passed,
			// and nothing younger than the retention.
			after := run(p, 25, 40, func(sec int) round { return at(float64(sec), 1<<20, 100<<20) })
			if len(after) != 0 {
				t.Errorf("after the pressure: %v, want nothing until the history is a minute old", after)
			}
		})
	}
}

// Defragmentation: when the file is mostly free (half, and enough to be
// worth it), at most once every defragEvery; never when off.
func TestPlanDefrag(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name              string
		defrag            bool
		size, inUse, quot int64
		want              bool
	}{
		{"mostly free", true, 100 * mib, 40 * mib, DefaultQuotaBytes, true},
		{"half free", true, 100 * mib, 50 * mib, DefaultQuotaBytes, true},
		{"not mostly free", true, 100 * mib, 60 * mib, DefaultQuotaBytes, false},
		{"too little to win", true, 10 * mib, 1 * mib, DefaultQuotaBytes, false},
		{"small quota: an eighth of it is enough", true, 10 * mib, 1 * mib, 8 * mib, true},
		{"off", false, 100 * mib, 1 * mib, DefaultQuotaBytes, false},
		{"near the quota, a quarter free", true, 80 * mib, 60 * mib, 100 * mib, true},
		{"near the quota, less free", true, 80 * mib, 61 * mib, 100 * mib, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlanner(Maintenance{Retention: time.Minute, Defrag: tc.defrag})
			r := at(0, tc.inUse, tc.quot)
			r.size = tc.size
			if d := p.step(r); d.defrag != tc.want {
				t.Fatalf("defrag %v, want %v", d.defrag, tc.want)
			}
		})
	}
	p := newPlanner(Maintenance{Retention: time.Minute, Defrag: true})
	free := func(sec int) round {
		r := at(float64(sec), 10*mib, DefaultQuotaBytes)
		r.size = 100 * mib
		return r
	}
	got := run(p, 0, 700, free)
	var secs []int
	for sec, d := range got {
		if d.defrag {
			secs = append(secs, sec)
		}
	}
	if len(secs) != 3 {
		t.Errorf("defragmented at seconds %v, want 0, 300 and 600", secs)
	}
	for _, sec := range []int{0, 300, 600} {
		if !got[sec].defrag {
			t.Errorf("no defragmentation at second %d (got %v)", sec, secs)
		}
	}
	// Near the quota: every defragNearEvery.
	p = newPlanner(Maintenance{Retention: time.Minute, Defrag: true})
	near := run(p, 0, 70, func(sec int) round {
		r := at(float64(sec), 50*mib, 100*mib)
		r.size = 80 * mib
		return r
	})
	secs = nil
	for sec, d := range near {
		if d.defrag {
			secs = append(secs, sec)
		}
	}
	if len(secs) != 3 || !near[0].defrag || !near[30].defrag || !near[60].defrag {
		t.Errorf("near the quota: defragmented at seconds %v, want 0, 30 and 60", secs)
	}
}

// The compaction interval is a tenth of the retention, within bounds.
func TestCompactEvery(t *testing.T) {
	for _, tc := range []struct{ retention, want time.Duration }{
		{time.Minute, 6 * time.Second}, {2 * time.Second, time.Second}, {24 * time.Hour, maxCompactEvery},
	} {
		if got := compactEvery(tc.retention); got != tc.want {
			t.Errorf("compactEvery(%s) = %s, want %s", tc.retention, got, tc.want)
		}
	}
}
