// Package durable owns the persisted form of a durable object: its state,
// timers and outbox as one value, and the table of the replies of its
// persisted changes, each a key of its own (pkg/authority state.go writes
// them); decoding what etcd holds back into an instance, checked (every
// refusal wraps actor.ErrCorruptState); and the node's durable metrics.
// When and how a node writes is the node's (pkg/node durable.go).
package durable

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/wire"
)

// EncodeTimers is t as persisted (nil: none).
func EncodeTimers(t *actor.Timers) []byte {
	if t == nil || t.Len() == 0 {
		return nil
	}
	return t.Encode()
}

// ReplyID is the key a persisted reply is written under: the operation
// id in lowercase hex.
func ReplyID(id wire.OperationID) string { return hex.EncodeToString(id[:]) }

// WatermarkMs is t's watermark as persisted (0: none).
func WatermarkMs(t *actor.ReplyTable) int64 {
	if w := t.Watermark(); !w.IsZero() {
		return w.UnixMilli()
	}
	return 0
}

// RestoreReplies rebuilds the persisted reply table of a read state. The
// bounds must be those a table can have (a window in milliseconds that
// overflows a time.Duration would wrap into another window), and each
// reply's id the key the node writes for it (ReplyID: lowercase hex), so
// that the next write persists the same bounds and keeps the same keys.
func RestoreReplies(rd authority.StateRead) (*actor.ReplyTable, error) {
	if ms := rd.Value.ReplyWindowMs; ms <= 0 || ms > actor.MaxReplyWindow.Milliseconds() {
		return nil, fmt.Errorf("%w: reply window %d ms out of [1, %d]", actor.ErrCorruptState, ms, actor.MaxReplyWindow.Milliseconds())
	}
	es := make([]actor.ReplyEntry, 0, len(rd.Replies))
	for _, r := range rd.Replies {
		b, err := hex.DecodeString(r.ID)
		if err != nil {
			return nil, fmt.Errorf("%w: reply %s: %v", actor.ErrCorruptState, r.ID, err)
		}
		id, err := wire.ParseOperationIDBytes(b)
		if err != nil {
			return nil, fmt.Errorf("%w: reply %s: %v", actor.ErrCorruptState, r.ID, err)
		}
		if ReplyID(id) != r.ID {
			return nil, fmt.Errorf("%w: reply %s: not in lowercase hex", actor.ErrCorruptState, r.ID)
		}
		es = append(es, actor.ReplyEntry{ID: id, Reply: actor.Reply{Code: r.Value.Code, Payload: r.Value.Payload, Message: r.Value.Message}})
	}
	var wm time.Time
	if ms := rd.Value.ReplyWatermarkMs; ms > 0 {
		wm = time.UnixMilli(ms)
	}
	return actor.RestoreReplyTable(time.Duration(rd.Value.ReplyWindowMs)*time.Millisecond, rd.Value.ReplyMaxEntries, wm, es)
}

// Decode is what a node restores from a persisted state rd
// (rd.Found): a new instance of typ restored from the state, its timers
// (nil: none), the table of the persisted replies and a copy of it for the
// instance's in-memory table, and its outbox (nil: empty). Every error
// wraps actor.ErrCorruptState (a type's Restore promises it). It reads
// nothing but rd.
func Decode(typ actor.Type, rd authority.StateRead) (inst actor.Object, timers *actor.Timers, table, replies *actor.ReplyTable, outbox *actor.Outbox, err error) {
	inst = typ.New()
	table, err = RestoreReplies(rd)
	if err == nil {
		replies, err = RestoreReplies(rd) // the in-memory table: a copy
	}
	if err == nil {
		err = inst.Restore(rd.Value.State)
	}
	if err == nil && len(rd.Value.Timers) > 0 {
		timers, err = actor.DecodeTimers(rd.Value.Timers)
	}
	if err == nil {
		outbox, err = actor.DecodeOutbox(rd.Value.Outbox)
	}
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	return inst, timers, table, replies, outbox, nil
}

// PersistSlack bounds how much the state value can grow between the size
// check and the write (the reply table's watermark after Record's eviction).
const PersistSlack = 32

// OutcomeLabel is the metric label of a write's outcome beyond written,
// moved, superseded and owner gone.
func OutcomeLabel(o authority.PersistOutcome) string {
	switch o {
	case authority.PersistStateMoved:
		return "state_moved"
	case authority.PersistNotWritten:
		return "not_written"
	}
	return "error"
}

// Metrics are the node's durable-object metrics.
type Metrics struct {
	Writes  *prometheus.CounterVec // outcome
	Seconds prometheus.Histogram
	Bytes   prometheus.Histogram
	Loads   *prometheus.CounterVec // result
}

// RegisterMetrics registers the durable-object metrics on reg.
func RegisterMetrics(reg *prometheus.Registry) *Metrics {
	var l prometheus.Labels
	m := &Metrics{
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_durable_writes_total",
			Help: "Durable object changes by outcome: written, unchanged (nothing to write), moved (written again from a newer store version), too_large, superseded, owner_gone, state_moved, not_written, uncertain, error.", ConstLabels: l},
			[]string{"outcome"}),
		Seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_durable_write_seconds", Help: "Time of the etcd transactions persisting durable object changes.",
			ConstLabels: l, Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16)}),
		Bytes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_durable_write_bytes", Help: "Size of the durable object writes (state value and reply), as written.",
			ConstLabels: l, Buckets: prometheus.ExponentialBuckets(64, 4, 12)}),
		Loads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_durable_loads_total",
			Help: "Durable objects whose persisted state was read by this node: restored (from etcd), empty (nothing persisted yet), failed.", ConstLabels: l},
			[]string{"result"}),
	}
	reg.MustRegister(m.Writes, m.Seconds, m.Bytes, m.Loads)
	return m
}
