package locationd

import (
	"flag"
	"strconv"
	"time"
)

// EventsConfig bounds the event stream, GET /v1/events (events.go).
type EventsConfig struct {
	// MaxStreams (--events-max-streams, default 64) is how many event
	// streams may be open at once; one more is refused with 429
	// resource_exhausted. Each holds a connection (--http-max-connections)
	// and a buffer of Buffer events. 1..65536.
	MaxStreams int
	// Buffer (--events-buffer, default 4096) is how many events may wait for
	// one stream's client; a client that falls that far behind gets an
	// "overflow" event and its stream is closed (it reconnects and resumes
	// from the events locationd still keeps, or starts afresh). 16..1048576.
	Buffer int
	// Heartbeat (--events-heartbeat, default 15s) is the interval of the
	// "heartbeat" event on an otherwise quiet stream, so that a client (and
	// any proxy between) sees it alive. 100ms..10m.
	Heartbeat time.Duration
}

// DefaultEventsConfig is EventsConfig's defaults.
func DefaultEventsConfig() EventsConfig {
	return EventsConfig{MaxStreams: 64, Buffer: 4096, Heartbeat: 15 * time.Second}
}

func (c *EventsConfig) addFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxStreams, "events-max-streams", c.MaxStreams, "most event streams (GET /v1/events) open at once; more get 429")
	fs.IntVar(&c.Buffer, "events-buffer", c.Buffer, "events that may wait for one event stream's client; one further behind is disconnected (16..1048576)")
	fs.DurationVar(&c.Heartbeat, "events-heartbeat", c.Heartbeat, "interval of the heartbeat event of an event stream (100ms..10m)")
}

func (c *EventsConfig) validate() error {
	switch {
	case c.MaxStreams < 1 || c.MaxStreams > 1<<16:
		return &FlagError{Flag: "--events-max-streams", Value: strconv.Itoa(c.MaxStreams), Reason: "want 1..65536"}
	case c.Buffer < 16 || c.Buffer > 1<<20:
		return &FlagError{Flag: "--events-buffer", Value: strconv.Itoa(c.Buffer), Reason: "want 16..1048576"}
	case c.Heartbeat < 100*time.Millisecond || c.Heartbeat > 10*time.Minute:
		return &FlagError{Flag: "--events-heartbeat", Value: c.Heartbeat.String(), Reason: "want 100ms..10m"}
	}
	return nil
}
