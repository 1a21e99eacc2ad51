package locationd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
)

// sse is one event read from a stream.
type sse struct{ id, typ, data string }

// stream is an open GET /v1/events.
type stream struct {
	resp *http.Response
	r    *bufio.Reader
}

func openStream(t *testing.T, ctx context.Context, url, lastID string) (*stream, *http.Response) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &stream{resp: resp, r: bufio.NewReader(resp.Body)}, resp
}

// next reads the next event (io.EOF at the end of the stream).
func (s *stream) next() (sse, error) {
	var ev sse
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.typ != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
}

// until reads events until f says done.
func (s *stream) until(t *testing.T, what string, f func(sse) bool) []sse {
	t.Helper()
	var seen []sse
	for {
		ev, err := s.next()
		if err != nil {
			t.Fatalf("waiting for %s: %v (read %d events)", what, err, len(seen))
		}
		seen = append(seen, ev)
		if f(ev) {
			return seen
		}
	}
}

// TestEventsBadInput: every bad parameter or resume id is a typed 400
// before anything is streamed, and opens nothing.
func TestEventsBadInput(t *testing.T) {
	r := start(t, nil)
	for _, tc := range []struct{ query, lastID string }{
		{"types=bogus", ""},
		{"types=", ""},
		{"types=owner,", ""},
		{"types=owner&types=record", ""},
		{"types=hello", ""}, // the stream's own: always sent, not chosen
		{"object=../owners", ""},
		{"object=actor/counter", ""},
		{"object=", ""},
		{"objects=actor/counter/c1", ""},
		{"types=%zz", ""},
		{"", "garbage"},
		{"", "0123456789abcdef"},
		{"", "0123456789abcdef-0"},
		{"", "0123456789abcdef-01"},
		{"", "0123456789ABCDEF-1"},
		{"", "0123-1"},
		{"", "0123456789abcdef-18446744073709551616"},
		{"", strings.Repeat("a", 300)},
		{"lastEventId=0123456789abcdef-2", "0123456789abcdef-1"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, resp := openStream(t, ctx, r.base+"/v1/events?"+tc.query, tc.lastID)
		if s != nil {
			t.Errorf("?%s Last-Event-ID %q: a stream opened", tc.query, tc.lastID)
			cancel()
			continue
		}
		var eb api.ErrorBody
		err := json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != 400 || err != nil || eb.Error == nil || eb.Error.Code != api.CodeInvalidArgument {
			t.Errorf("?%s Last-Event-ID %q: %d %+v %v, want 400 invalid_argument", tc.query, tc.lastID, resp.StatusCode, eb.Error, err)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		status, _, body := rawGet(t, m, r.base+"/v1/events")
		if status != 405 || !strings.Contains(string(body), api.CodeMethodNotAllowed) {
			t.Errorf("%s /v1/events: %d %s", m, status, body)
		}
	}
	if n := r.srv.events.streams(); n != 0 {
		t.Errorf("%d streams open after refusals", n)
	}
}

// TestEventsLimits: one stream past --events-max-streams is a typed 429;
// heartbeats come on a quiet stream; a client that falls --events-buffer
// events behind gets "overflow" and its stream ends, counted.
func TestEventsLimits(t *testing.T) {
	r := start(t, func(c *Config) {
		c.Events.MaxStreams = 1
		c.Events.Buffer = 16
		c.Events.Heartbeat = 100 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _ := openStream(t, ctx, r.base+"/v1/events?types=reset", "")
	if s == nil {
		t.Fatal("no stream")
	}
	s.until(t, "hello", func(e sse) bool { return e.typ == EventHello })
	_, resp := openStream(t, ctx, r.base+"/v1/events", "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || !strings.Contains(string(body), api.CodeResourceExhausted) {
		t.Errorf("a stream past the bound: %d %s, want 429 resource_exhausted", resp.StatusCode, body)
	}
	s.until(t, "a heartbeat", func(e sse) bool { return e.typ == EventHeartbeat && strings.Contains(e.data, `"time"`) })

	// Stop reading; publish far more than the buffer and the socket hold.
	big := strings.Repeat("x", 16<<10)
	for range 2000 {
		r.srv.events.publish(EventReset, "", api.Reset{Reason: big})
	}
	evs := s.until(t, "overflow", func(e sse) bool { return e.typ == EventOverflow })
	if _, err := s.next(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("after overflow: %v, want the stream's end", err)
	}
	if len(evs) >= 2000 {
		t.Errorf("read %d events of 2000 before the overflow", len(evs))
	}
	if m := get(t, r.base+"/metrics"); !strings.Contains(m, "meshloc_locationd_event_streams_dropped_total 1") {
		t.Error("the dropped stream is not counted")
	}
	waitFor(t, "the stream to be closed", func() bool { return r.srv.events.streams() == 0 })
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !f() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestEventsStream: against two real nodes, a stream shows the nodes'
// streams connected and their stats, a relocation's start and end (with
// its timeline) and its record changes; a reconnect with Last-Event-ID
// resumes with nothing repeated; ?object= keeps that object's events.
// GET /v1/relocations/{id} has both sides and the phases, and ?history=
// the record's earlier versions.
func TestEventsStream(t *testing.T) {
	m := startMesh(t, 2)
	base := m.ld.base
	c, err := client.New(context.Background(), client.Config{Etcd: m.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const obj = "actor/counter/ev"
	counterValue(t, c, obj, "add", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	s, _ := openStream(t, ctx, base+"/v1/events", "")
	one, _ := openStream(t, ctx, base+"/v1/events?types=record&object="+obj, "")
	hello := s.until(t, "hello", func(e sse) bool { return e.typ == EventHello })
	if !strings.Contains(hello[len(hello)-1].data, `"resumed":false`) {
		t.Errorf("hello %s", hello[len(hello)-1].data)
	}
	connected := map[string]bool{}
	s.until(t, "both nodes' streams", func(e sse) bool {
		if e.typ == EventWatch && strings.Contains(e.data, `"connected":true`) {
			var w api.NodeWatch
			_ = json.Unmarshal([]byte(e.data), &w)
			connected[w.Node] = true
		}
		return len(connected) == 2
	})
	s.until(t, "stats", func(e sse) bool { return e.typ == EventStats && strings.Contains(e.data, `"hostedObjects"`) })

	relocate := func() string {
		status, body := post(t, base, "", `{"object":"`+obj+`"}`)
		var rel api.Relocation
		if status != 200 || json.Unmarshal(body, &rel) != nil || rel.Outcome != api.OutcomeCompleted {
			t.Fatalf("relocate: %d %s", status, body)
		}
		return rel.RelocationID
	}
	id := relocate()
	var last string
	var started, ended bool
	var records int
	s.until(t, "the relocation's end", func(e sse) bool {
		if e.id != "" {
			last = e.id
		}
		switch e.typ {
		case EventRecord:
			if strings.Contains(e.data, `"object":"`+obj+`"`) {
				records++
			}
		case EventRelocation:
			var r api.Relocation
			if json.Unmarshal([]byte(e.data), &r) != nil || r.RelocationID != id || r.Role != "source" {
				return false
			}
			started = started || r.Outcome == ""
			if r.Outcome == api.OutcomeCompleted && len(r.Timeline) > 0 && r.Timeline[len(r.Timeline)-1].Step == "done" {
				ended = true
			}
		}
		return ended
	})
	if !started {
		t.Error("no event of the relocation's start")
	}
	// The object's own stream: its record changes, nothing else.
	for n := 0; n < 2; {
		e, err := one.next()
		if err != nil {
			t.Fatal(err)
		}
		if e.typ == EventHello || e.typ == EventHeartbeat {
			continue
		}
		if e.typ != EventRecord || !strings.Contains(e.data, `"object":"`+obj+`"`) {
			t.Fatalf("?object= stream: %+v", e)
		}
		n++
	}

	// GET /v1/relocations/{id}: both sides and every phase.
	var det api.RelocationDetail
	if err := json.Unmarshal([]byte(get(t, base+"/v1/relocations/"+id)), &det); err != nil {
		t.Fatal(err)
	}
	if det.Role != "source" || det.Counterpart == nil || det.Counterpart.Role != "target" || len(det.Phases) < 8 {
		t.Fatalf("relocation detail %+v", det)
	}
	for _, p := range det.Phases {
		if p.Phase == "commit" && p.TargetMicros <= 0 {
			t.Errorf("the target's commit took %d µs", p.TargetMicros)
		}
		if p.Phase == "intent" && (p.SourceStartUnixMicros == 0 || p.TargetStartUnixMicros != 0) {
			t.Errorf("intent %+v: the source's only", p)
		}
	}
	// History: the versions before the current one (the commit): the
	// intent's, and the activation's.
	var o api.ObjectResponse
	if err := json.Unmarshal([]byte(get(t, base+"/v1/objects/"+obj+"?history=8")), &o); err != nil {
		t.Fatal(err)
	}
	if len(o.History) != 2 || o.History[0].Record.State != "relocating" || o.History[1].StoreVersion >= o.History[0].StoreVersion {
		t.Errorf("history %+v", o.History)
	}
	for _, q := range []string{"history=0", "history=65", "history=x", "history=1&history=2", "since=1"} {
		if status, _, body := rawGet(t, "GET", base+"/v1/objects/"+obj+"?"+q); status != 400 || !strings.Contains(string(body), api.CodeInvalidArgument) {
			t.Errorf("?%s: %d %s", q, status, body)
		}
	}

	// Resume: a new stream after the last id seen misses nothing and
	// repeats nothing.
	s.resp.Body.Close()
	s2, _ := openStream(t, ctx, base+"/v1/events?types=relocation,record", last)
	hello = s2.until(t, "hello", func(e sse) bool { return e.typ == EventHello })
	if !strings.Contains(hello[len(hello)-1].data, `"resumed":true`) {
		t.Errorf("resumed hello %s", hello[len(hello)-1].data)
	}
	id2 := relocate()
	s2.until(t, "the second relocation's end", func(e sse) bool {
		if e.id == last || (e.id != "" && seqOf(e.id) <= seqOf(last)) {
			t.Errorf("event %s repeated after resuming from %s", e.id, last)
		}
		return e.typ == EventRelocation && strings.Contains(e.data, id2) && strings.Contains(e.data, `"outcome":"completed"`)
	})
	// A resume point of another epoch starts afresh.
	s3, _ := openStream(t, ctx, base+"/v1/events", "0123456789abcdef-5")
	hello = s3.until(t, "hello", func(e sse) bool { return e.typ == EventHello })
	if !strings.Contains(hello[len(hello)-1].data, `"resumed":false`) {
		t.Errorf("hello after a foreign id %s", hello[len(hello)-1].data)
	}
}

func seqOf(id string) uint64 {
	_, n, err := parseEventID(id)
	if err != nil {
		panic(fmt.Sprintf("id %q: %v", id, err))
	}
	return n
}
