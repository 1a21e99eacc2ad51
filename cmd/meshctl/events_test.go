package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
)

// meshctl events prints every event of the stream, as lines or JSON lines,
// asks for the types and object given, and refuses an unknown type.
func TestEvents(t *testing.T) {
	f := newFakeRelocations(t)
	defer func(old func() time.Time) { now = old }(now)
	now = func() time.Time { return t0 }
	r := f.run("events", "--for", "200ms")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 6 || lines[0] != `12:00:00.000 hello - {"resumed":false}` || !strings.HasPrefix(lines[3], `12:00:00.000 relocation e-3 {"relocationId":"01958a3c-4f00-7abc-8def-0000000000c2"`) {
		t.Fatalf("events printed:\n%s", r.stdout)
	}
	r = f.run("-o", "json", "events", "--types", "relocation,watch", "--object", "actor/counter/c2", "--for", "200ms")
	var last struct {
		ID, Type string
		Data     api.NodeWatch
	}
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 6 || json.Unmarshal([]byte(lines[5]), &last) != nil || last.ID != "e-5" || last.Type != "watch" || !last.Data.Connected {
		t.Fatalf("exit %d, events printed:\n%s", r.code, r.stdout)
	}
	f.mu.Lock()
	q := fmt.Sprint(f.queries)
	f.mu.Unlock()
	if q != "[events  events object=actor%2Fcounter%2Fc2&types=relocation%2Cwatch]" {
		t.Errorf("requests %q", q)
	}
	for _, bad := range [][]string{{"events", "--types", "bogus"}, {"events", "--object", "../x"}, {"events", "--for", "-1s"}} {
		if r := f.run(bad...); r.code != 2 {
			t.Errorf("%v: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
}

// An event that is not what locationd sends never reaches the terminal raw.
func TestPrintEventEscapes(t *testing.T) {
	defer func(old func() time.Time) { now = old }(now)
	now = func() time.Time { return t0 }
	ev := client.Event{ID: "e-1\x1b[2J", Type: "x\x07", Data: []byte("\x1b[31mred")}
	var b bytes.Buffer
	if err := printEvent(&b, false, ev); err != nil || b.String() != `12:00:00.000 x\a e-1\x1b[2J "\u001b[31mred"`+"\n" {
		t.Errorf("%q: %v", b.String(), err)
	}
	b.Reset()
	var back struct{ ID, Type, Data string }
	if err := printEvent(&b, true, ev); err != nil || json.Unmarshal(b.Bytes(), &back) != nil || back.Data != "\x1b[31mred" || back.ID != ev.ID {
		t.Errorf("%q: %v", b.String(), err)
	}
}
