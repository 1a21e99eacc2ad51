package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
)

// readAll reads every event of a stream.
func readAll(in string) ([]Event, *sseReader, error) {
	rd := newSSEReader(strings.NewReader(in))
	var out []Event
	for {
		ev, err := rd.next()
		if err != nil {
			return out, rd, err
		}
		out = append(out, ev)
	}
}

func TestSSEReader(t *testing.T) {
	in := "retry: 1500\n: a comment\n\nevent: hello\ndata: {\"epoch\":\"e\"}\n\n" +
		"id: e-1\r\nevent: relocation\r\ndata: {\"a\":1}\r\n\r\n" +
		"event: heartbeat\ndata: {}\n\n" + // no id: keeps e-1
		"id: e-2\ndata: line one\ndata:line two\nbogus: field\n\n" +
		"id: e-3\nevent: unfinished\ndata: x\n" // no blank line: never dispatched
	evs, rd, err := readAll(in)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	want := []Event{
		{ID: "", Type: "hello", Data: []byte(`{"epoch":"e"}`)},
		{ID: "e-1", Type: "relocation", Data: []byte(`{"a":1}`)},
		{ID: "e-1", Type: "heartbeat", Data: []byte(`{}`)},
		{ID: "e-2", Type: "message", Data: []byte("line one\nline two")},
	}
	if fmt.Sprintf("%q", evs) != fmt.Sprintf("%q", want) {
		t.Errorf("events\n%q\nwant\n%q", evs, want)
	}
	if rd.retry != 1500*time.Millisecond {
		t.Errorf("retry %v", rd.retry)
	}
	// A line or an event over MaxEventBytes ends the stream with an error.
	for _, big := range []string{
		"data: " + strings.Repeat("x", MaxEventBytes+1) + "\n\n",
		strings.Repeat("data: "+strings.Repeat("y", 1000)+"\n", MaxEventBytes/1000+1) + "\n",
		": " + strings.Repeat("z", MaxEventBytes+8) + "\n",
	} {
		if _, _, err := readAll(big); !errors.Is(err, errEventTooLarge) {
			t.Errorf("a stream of %d bytes: %v", len(big), err)
		}
	}
	// A bad retry, an id with NUL: ignored.
	_, rd, _ = readAll("retry: 12x\nretry: -5\nid: a\x00b\ndata: 1\n\n")
	if rd.retry != 0 || rd.lastID != "" {
		t.Errorf("retry %v, last id %q", rd.retry, rd.lastID)
	}
}

// FuzzSSEReader: any bytes end in events within bounds, never a panic; and
// what locationd's format writes (id, event, one data line) reads back.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("id: 1\nevent: x\ndata: {}\n\n"), "e-1", "relocation", "{\"a\":1}")
	f.Add([]byte("data:\n\ndata\n\n:\n\r\n"), "", "hello", "")
	f.Add([]byte("retry: 99999999999\n\n"), "x", "t", "\x00")
	f.Fuzz(func(t *testing.T, raw []byte, id, typ, data string) {
		rd := newSSEReader(bytes.NewReader(raw))
		for {
			ev, err := rd.next()
			if err != nil {
				break
			}
			if len(ev.Data) > MaxEventBytes || ev.Type == "" {
				t.Fatalf("event %q of %d bytes", ev.Type, len(ev.Data))
			}
		}
		clean := func(s string) bool { return s != "" && !strings.ContainsAny(s, "\r\n\x00") && s[0] != ' ' }
		if !clean(id) || !clean(typ) || strings.ContainsAny(data, "\r\n") || len(data) > 4096 {
			return
		}
		in := "id: " + id + "\nevent: " + typ + "\ndata: " + data + "\n\n"
		evs, _, _ := readAll(in)
		if len(evs) != 1 || evs[0].ID != id || evs[0].Type != typ || string(evs[0].Data) != data {
			t.Fatalf("%q read as %q", in, evs)
		}
	})
}

// fakeEvents is a /v1/events of answers given in turn, recording the
// Last-Event-ID of each request.
type fakeEvents struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter, r *http.Request)
	lastIDs []string
}

func (f *fakeEvents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	n := len(f.lastIDs)
	f.lastIDs = append(f.lastIDs, r.Header.Get("Last-Event-ID"))
	f.mu.Unlock()
	if r.URL.Path != "/v1/events" || r.URL.RawQuery != "object=actor%2Fcounter%2Fc1&types=relocation%2Cwatch" {
		http.Error(w, "bad request "+r.URL.String(), http.StatusBadRequest)
		return
	}
	if n >= len(f.answers) {
		<-r.Context().Done()
		return
	}
	f.answers[n](w, r)
}

// stream answers body as an event stream, then ends it.
func stream(body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	}
}

// hang answers body as an event stream, then sends nothing more.
func hang(body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		stream(body)(w, r)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

func status(code int, body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

func TestEvents(t *testing.T) {
	q := EventsQuery{Types: []string{api.EventRelocation, api.EventWatch}, Object: "actor/counter/c1"}
	run := func(t *testing.T, q EventsQuery, answers ...func(w http.ResponseWriter, r *http.Request)) ([]Event, []string, error) {
		f := &fakeEvents{answers: answers}
		srv := httptest.NewServer(f)
		defer srv.Close()
		adm, err := NewAdmin(srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var got []Event
		err = adm.Events(ctx, q, func(ev Event) error {
			got = append(got, ev)
			if ev.Type == "stop" {
				return errStop
			}
			return nil
		})
		f.mu.Lock()
		defer f.mu.Unlock()
		return got, f.lastIDs, err
	}
	t.Run("resumes after a break and a 503", func(t *testing.T) {
		got, ids, err := run(t, q,
			stream("retry: 10\nevent: hello\ndata: {}\n\nid: e-1\nevent: relocation\ndata: 1\n\nid: e-2\nevent: relocation\ndata: 2\n\n"),
			status(503, `{"error":{"code":"unavailable","message":"etcd"}}`),
			status(429, `{"error":{"code":"resource_exhausted","message":"too many streams"}}`),
			stream("event: hello\ndata: {\"resumed\":true}\n\nid: e-3\nevent: stop\ndata: 3\n\n"),
		)
		if !errors.Is(err, errStop) {
			t.Fatalf("Events: %v", err)
		}
		if fmt.Sprint(ids) != "[ e-2 e-2 e-2]" || len(got) != 5 || got[3].ID != "e-2" || got[4].ID != "e-3" {
			t.Errorf("Last-Event-IDs %q, events %q", ids, got)
		}
	})
	t.Run("a refusal is returned at once", func(t *testing.T) {
		_, ids, err := run(t, EventsQuery{Types: []string{"bogus"}})
		if e, ok := api.AsError(err); !ok || e.Code != api.CodeInvalidArgument || len(ids) != 1 {
			t.Errorf("Events: %v after %d requests", err, len(ids))
		}
		_, ids, err = run(t, q, status(403, `{"error":{"code":"permission_denied","message":"viewer"}}`))
		if !errors.Is(err, api.ErrPermissionDenied) || len(ids) != 1 {
			t.Errorf("Events: %v after %d requests", err, len(ids))
		}
	})
	t.Run("not a stream", func(t *testing.T) {
		_, ids, err := run(t, q, status(200, `{}`))
		if e, ok := api.AsError(err); !ok || e.Code != api.CodeInternal || len(ids) != 1 {
			t.Errorf("Events: %v after %d requests", err, len(ids))
		}
		_, ids, err = run(t, q, stream("retry: 10\ndata: "+strings.Repeat("x", MaxEventBytes+1)+"\n\n"))
		if !errors.Is(err, errEventTooLarge) || len(ids) != 1 {
			t.Errorf("Events: %v after %d requests", err, len(ids))
		}
	})
	t.Run("a silent stream is opened again", func(t *testing.T) {
		idle := q
		idle.Idle = 50 * time.Millisecond
		_, ids, err := run(t, idle,
			hang("retry: 10\nid: e-7\nevent: hello\ndata: {}\n\n"),
			stream("event: stop\ndata: {}\n\n"),
		)
		if !errors.Is(err, errStop) || fmt.Sprint(ids) != "[ e-7]" {
			t.Errorf("Events: %v, Last-Event-IDs %q", err, ids)
		}
	})
	t.Run("bad object", func(t *testing.T) {
		adm, _ := NewAdmin("http://127.0.0.1:1", nil)
		for _, q := range []EventsQuery{{Object: "../x"}, {Idle: -time.Second}} {
			if err := adm.Events(context.Background(), q, func(Event) error { return nil }); !errors.Is(err, api.ErrInvalidArgument) {
				t.Errorf("Events(%+v): %v", q, err)
			}
		}
		if err := adm.Events(context.Background(), EventsQuery{}, nil); !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("Events without a function: %v", err)
		}
	})
}

var errStop = errors.New("stop")
