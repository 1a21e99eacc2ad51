package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/verify"
)

func TestParseKinds(t *testing.T) {
	one := ProbeFaults(Config{EtcdMembers: 1})
	full := ProbeFaults(Config{EtcdMembers: 3, Proxies: true})
	got, err := full.ParseKinds("all", true)
	if err != nil || len(got) != len(Kinds)+1 || got[len(got)-1] != Failpoint {
		t.Errorf("all with proxies and 3 members: %v %v", got, err)
	}
	got, err = one.ParseKinds("all", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range got {
		if why := one.Need(k); why != "" || k == MoveLeader || k == PartitionNode {
			t.Errorf("all without proxies and with 1 member has %s", k)
		}
	}
	for _, bad := range []string{"kill-everything", "move-leader", "partition-etcd"} {
		if _, err := one.ParseKinds("kill-owner,"+bad, false); err == nil {
			t.Errorf("%s accepted without the cluster it needs", bad)
		}
	}
	if got, err := one.ParseKinds("none", true); err != nil || len(got) != 0 {
		t.Errorf("none: %v %v", got, err)
	}
	if got, err := one.ParseKinds("failpoint:target.before-commit=crash@2", false); err != nil || len(got) != 1 {
		t.Errorf("a named failpoint: %v %v", got, err)
	}
}

func TestSchedule(t *testing.T) {
	f := ProbeFaults(Config{EtcdMembers: 1})
	fs, err := f.Schedule([]string{KillOwner, PauseNode}, 60*time.Second, 5*time.Second, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range fs {
		got = append(got, x.Kind+"@"+x.At.String())
	}
	// The last one would start within half a spacing of the end: none.
	if want := "kill-owner@5s pause-node@25s kill-owner@45s"; strings.Join(got, " ") != want {
		t.Errorf("schedule %q, want %q", strings.Join(got, " "), want)
	}
}

func TestControlSpecArmsEachPointOnce(t *testing.T) {
	s := ControlSpec(Spec{})
	var fps string
	for _, e := range s.Cluster.Env {
		if v, ok := strings.CutPrefix(e, "MESHLOC_FAILPOINTS="); ok {
			fps = v
		}
	}
	seen := map[string]bool{}
	for _, fp := range strings.Split(fps, ";") {
		name, _, _ := strings.Cut(fp, "=")
		if seen[name] {
			t.Errorf("point %s armed twice in %q", name, fps)
		}
		seen[name] = true
	}
	for _, p := range []string{"target.before-commit", "node.before-reply", "source.chunk-data", "source.before-cutover"} {
		if !seen[p] {
			t.Errorf("control run does not arm %s: %q", p, fps)
		}
	}
	if !s.Cluster.Proxies || s.Cluster.LeaseTTL != 5*time.Second || len(s.Faults) < 3 {
		t.Errorf("control run: proxies %v, TTL %v, faults %v", s.Cluster.Proxies, s.Cluster.LeaseTTL, s.Faults)
	}
}

func TestCaughtAndFigure(t *testing.T) {
	rep := &verify.Report{Totals: verify.Totals{Lost: 2}, Violations: []verify.Violation{{Check: "list/lost"}, {Check: "list/lost"}}}
	rep.Liveness.Objects, rep.Liveness.Readable = 3, 3
	if got := Caught(rep); got != "lost=2, list/lost×2" {
		t.Errorf("Caught %q", got)
	}
	if got := Caught(&verify.Report{}); got != "nothing" {
		t.Errorf("Caught of a clean report %q", got)
	}
	fig := PlantedFigure([]PlantResult{{Bug: "a", Detected: true}, {Bug: "b"}})
	if fig != "planted bugs detected 1/2 (missed: b)" {
		t.Errorf("figure %q", fig)
	}
}
