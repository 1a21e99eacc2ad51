package locationd

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
)

// The Go client's Events follows a real stream through a proxy that cuts
// its connection: it opens the stream again after the last event it saw,
// locationd says it resumed, and no relocation event comes twice (the
// nodes' watch state is sent again to every new stream, by design).
func TestEventsClientResumes(t *testing.T) {
	m := startMesh(t, 2)
	c, err := client.New(context.Background(), client.Config{Etcd: m.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const obj = "actor/counter/evc"
	counterValue(t, c, obj, "add", "1")
	px, err := tcpproxy.New("127.0.0.1:0", strings.TrimPrefix(m.ld.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	adm, err := client.NewAdmin("http://"+px.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	evs := make(chan client.Event, 1024)
	done := make(chan error, 1)
	go func() {
		done <- adm.Events(ctx, client.EventsQuery{Types: []string{api.EventRelocation, api.EventWatch}, Object: obj}, func(ev client.Event) error {
			evs <- ev
			return nil
		})
	}()
	seen := map[string]bool{}
	until := func(what string, f func(client.Event) bool) {
		t.Helper()
		for {
			select {
			case ev := <-evs:
				if ev.Type == api.EventRelocation {
					if seen[ev.ID] {
						t.Errorf("event %s %s came twice", ev.ID, ev.Type)
					}
					seen[ev.ID] = true
				}
				if f(ev) {
					return
				}
			case err := <-done:
				t.Fatalf("waiting for %s: Events returned %v", what, err)
			}
		}
	}
	hello := func(resumed bool) func(client.Event) bool {
		return func(ev client.Event) bool {
			var h api.Hello
			if ev.Type != api.EventHello {
				return false
			}
			if err := json.Unmarshal(ev.Data, &h); err != nil || h.Resumed != resumed {
				t.Fatalf("hello %s, want resumed %v", ev.Data, resumed)
			}
			return true
		}
	}
	ended := func(id string) func(client.Event) bool {
		return func(ev client.Event) bool {
			var r api.Relocation
			if ev.Type != api.EventRelocation || json.Unmarshal(ev.Data, &r) != nil {
				return false
			}
			if r.Object != obj || ev.ID == "" {
				t.Fatalf("event %q of %s on the stream of %s", ev.ID, r.Object, obj)
			}
			return r.RelocationID == id && r.Role == "source" && r.Outcome == api.OutcomeCompleted
		}
	}
	relocate := func() string {
		status, body := post(t, m.ld.base, "", `{"object":"`+obj+`"}`)
		var rel api.Relocation
		if status != 200 || json.Unmarshal(body, &rel) != nil || rel.Outcome != api.OutcomeCompleted {
			t.Fatalf("relocate: %d %s", status, body)
		}
		return rel.RelocationID
	}
	until("hello", hello(false))
	connected := map[string]bool{}
	until("locationd's streams from both nodes", func(ev client.Event) bool {
		var w api.NodeWatch
		if ev.Type == api.EventWatch && json.Unmarshal(ev.Data, &w) == nil && w.Connected {
			connected[w.Node] = true
		}
		return len(connected) == 2
	})
	until("the first relocation's end", ended(relocate()))
	px.ResetConns()
	until("the resumed hello", hello(true))
	until("the second relocation's end", ended(relocate()))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Events after cancel: %v", err)
	}
}
