package api

// The event stream, GET /v1/events (text/event-stream): each event has an
// id (except hello and heartbeat), a type and one line of JSON data. The
// types and the data of those that are not already shapes of this package
// (a relocation event's data is a Relocation with Node set, an owner's
// carries an Owner) are defined here, for the server and its clients.
const (
	// EventHello is first on every stream: its data is a Hello.
	EventHello = "hello"
	// EventOwner: an owner key changed (etcd watch).
	EventOwner = "owner"
	// EventRecord: an authority record changed (etcd watch).
	EventRecord = "record"
	// EventRelocation: a relocation side started or ended, as its node
	// reports it; its data is a Relocation.
	EventRelocation = "relocation"
	// EventStats: a node's figures, once a second: a NodeStats.
	EventStats = "stats"
	// EventWatch: locationd's stream from a node connected or broke: a
	// NodeWatch. While it is broken, that node's relocation events are
	// missed.
	EventWatch = "watch"
	// EventReset: the etcd watch restarted (a Reset): what came from it
	// may have been missed.
	EventReset = "reset"
	// EventHeartbeat keeps an idle stream alive (no id).
	EventHeartbeat = "heartbeat"
	// EventOverflow is the last event of a client that fell too far behind:
	// the server closes the stream; reconnecting resumes.
	EventOverflow = "overflow"
)

// Hello is the data of EventHello. Resumed: the stream goes on after the
// client's Last-Event-ID with nothing missed. False: start afresh (read the
// snapshots: owners, objects, relocations), then follow the stream.
type Hello struct {
	// Epoch names the serving locationd's life: ids of another are not
	// resumed.
	Epoch   string `json:"epoch"`
	Resumed bool   `json:"resumed"`
}

// NodeStats is the data of EventStats.
type NodeStats struct {
	Node                string  `json:"node"`
	UnixMs              int64   `json:"unixMs"`
	CallsTotal          uint64  `json:"callsTotal"`
	CallsPerSecond      float64 `json:"callsPerSecond"`
	HostedObjects       uint32  `json:"hostedObjects"`
	RelocationsInFlight uint32  `json:"relocationsInFlight"`
}

// NodeWatch is the data of EventWatch.
type NodeWatch struct {
	Node      string `json:"node"`
	Address   string `json:"address"`
	Connected bool   `json:"connected"`
	Error     string `json:"error,omitempty"`
}

// Reset is the data of EventReset.
type Reset struct {
	Reason string `json:"reason"`
}
