package integration

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
)

// Groups end to end with real processes and meshctl: create a group on n1,
// members created by join, an actor on n2 joined with --wait (Actor Join),
// the group relocated whole with meshctl relocate, members listed; every
// member keeps its state and lives with its group.
func TestMeshGroupsMeshctl(t *testing.T) {
	m := startMesh(t, 2)
	meshctl := func(args ...string) (string, string, int) {
		cmd := exec.Command(binary(t, "meshctl"), append([]string{"--locationd", m.api.Base()}, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	must := func(args ...string) string {
		out, errs, code := meshctl(args...)
		if code != 0 {
			t.Fatalf("meshctl %v: exit %d\n%s%s", args, code, out, errs)
		}
		t.Logf("meshctl %s:\n%s", strings.Join(args, " "), out)
		return out
	}
	must("group", "create", "group/g1", "--on", "n1")
	must("group", "join", "group/g1", "actor/counter/ga")
	must("group", "join", "group/g1", "actor/counter/gb")
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx := context.Background()
	for range 3 {
		if _, err := add(ctx, c, "actor/counter/ga"); err != nil {
			t.Fatal(err)
		}
	}
	// An actor on n2 joins: Actor Join, waited for.
	var far string
	for _, name := range []string{"actor/counter/f1", "actor/counter/f2", "actor/counter/f3", "actor/counter/f4", "actor/counter/f5", "actor/counter/f6", "actor/counter/f7"} {
		if _, err := add(ctx, c, name); err != nil {
			t.Fatal(err)
		}
		if m.object(t, name).Record.Owner.ID == "n2" {
			far = name
			break
		}
	}
	if far == "" {
		t.Skip("placement put no actor on n2")
	}
	out := must("group", "join", "group/g1", far, "--wait")
	if !strings.Contains(out, "RELOCATION") || !strings.Contains(out, ": completed") {
		t.Fatalf("actor join: %s", out)
	}
	// A member alone is refused; the group moves whole.
	if out, errs, code := meshctl("relocate", far, "--to", "n2"); code != 1 || !strings.Contains(errs, "conflict") {
		t.Fatalf("relocate a member alone: exit %d %s%s", code, out, errs)
	}
	out = must("relocate", "group/g1", "--to", "n2")
	if !strings.Contains(out, ": completed") {
		t.Fatalf("relocate the group: %s", out)
	}
	for _, o := range []string{"group/g1", "actor/counter/ga", "actor/counter/gb", far} {
		if r := m.object(t, o); r.Record.Owner.ID != "n2" {
			t.Errorf("%s on %s after the group moved", o, r.Record.Owner)
		}
	}
	out = must("group", "members", "group/g1")
	for _, mem := range []string{"actor/counter/ga", "actor/counter/gb", far} {
		if !strings.Contains(out, mem) {
			t.Errorf("members lack %s:\n%s", mem, out)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if v, err := add(cctx, c, "actor/counter/ga"); err != nil || v != 4 {
		t.Fatalf("ga after the moves: %d %v", v, err)
	}
	if v, err := add(cctx, c, far); err != nil || v != 2 {
		t.Fatalf("%s after the moves: %d %v", far, v, err)
	}
	must("group", "leave", "group/g1", far)
	must("relocate", far, "--to", "n1")
}
