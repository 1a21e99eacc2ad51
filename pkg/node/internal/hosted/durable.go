package hosted

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meshloc/meshloc/pkg/node/calltrace"
	"github.com/meshloc/meshloc/pkg/node/durable"
	"github.com/meshloc/meshloc/pkg/tracing"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/reminder"
	"github.com/meshloc/meshloc/pkg/statestore"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Durable objects (docs/design.md §5a): a type with actor.Type.Durable set
// persists every acknowledged change in etcd before the reply.
//
// What is persisted (pkg/authority state.go): at state/<object> the
// object's Snapshot, its timers and the bounds and watermark of a reply
// table that holds the replies of the persisted changes only, whose entries
// are keys of their own (state/<object>/replies/<op>): a write carries the
// state and one reply, and deletes the replies the table evicted. The node
// keeps that table apart from the object's in-memory reply table (which
// also holds the replies of read-only requests and travels with
// relocations): replies of reads can be large (a bank's ledger) and need no
// persistence, because a read retried after a crash may run again.
//
// When: after each request (and timer fire) the node takes a Snapshot; if
// the bytes and the timers are those last persisted, nothing is written (a
// read). Otherwise, before the reply is recorded or sent, it writes the new
// value with authority.Store.PersistState, one transaction fenced by the
// authority record's store version, the owner key and the state key's own
// version:
//
//   - written: the reply is recorded and sent;
//   - moved (the node's own intent or preserve rewrote the record under the
//     same fence): written again from the new store version;
//   - superseded (the record names another owner or generation), owner gone
//     (lease lost), state moved, or an outcome that stays uncertain: the
//     change is not acknowledged (NOT_OWNER with the new owner, or
//     UNAVAILABLE: the caller retries with the same operation id) and the
//     instance is dropped; the next call re-activates the object from etcd;
//   - over --durable-max-bytes: refused with CODE_STATE_TOO_LARGE, the
//     instance rolled back to the last persisted state (not recorded in the
//     reply table: a retry runs again and is refused again while the state
//     is the same).
//
// Re-activation: when a node takes over an object whose owner died
// (pkg/authority Recover: the object generation is bumped as for memory
// objects, which keeps the audit's and the checkers' notion of a recovery),
// or finds itself named in the record without an instance, it restores the
// persisted state, timers and replies instead of starting empty, and
// answers normally: no CODE_STATE_LOST, also to a caller that knew the old
// object generation (nothing was lost). A first activation (no record)
// starts from the type's initial state.
//
// Relocation: the payload carries the state as for every object; the
// commit (pkg/authority Commit, unchanged) gives the target a new store
// version, and the target reads state/<object> before its first write to
// learn the state key's version and the persisted reply table it extends.
// The source can no longer write once the commit rewrote the record.

// durableState is the persistence bookkeeping of a hosted durable object.
// It is touched only by activation (before the object is ready) and by the
// object's drain goroutine, like the instance.
type durableState struct {
	state    []byte            // Snapshot as last persisted (or the initial one: what restoring an absent key gives)
	timers   []byte            // timers encoding as last persisted (nil: none)
	outbox   []byte            // outbox encoding as last persisted (nil: empty; messages.go)
	table    *actor.ReplyTable // replies of the persisted changes, as in etcd
	stateRev int64             // ModRevision of state/<object> last written or read (0: absent)
	seq      uint64            // StateValue.Seq of the last write
	rem      []reminder.Def    // reminders as last persisted (reminders.go)
	// fired: the reminder due times the turn fired. Such a turn is
	// persisted even if nothing else changed (its persisted reply absorbs
	// a retry), and the write advances their schedule entries.
	fired []firedDue
}

func (n *Env) durableCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), n.cfg.CallTimeout)
}

// initialDurable is the bookkeeping of an object with nothing persisted:
// its initial state (what a restore from an absent key gives) and an empty
// reply table with the given bounds (0: the node's).
func (h *Object) initialDurable(stateRev int64, window time.Duration, entries int) (*durableState, error) {
	if window == 0 {
		window = h.env.cfg.DedupWindow
	}
	var state []byte
	err := h.Guard("Snapshot", func() (err error) { state, err = h.Typ.New().Snapshot(); return err })
	if err != nil {
		return nil, fmt.Errorf("initial snapshot of %s: %w", h.name, err)
	}
	return &durableState{state: state, table: actor.NewReplyTable(window, entries), stateRev: stateRev}, nil
}

// freshDurable starts the bookkeeping of an object this node just activated
// (no record existed): the initial state, nothing persisted. A state key
// left by an earlier incarnation whose record is gone is not restored (the
// catalog gave the object a new generation); its version is taken so that
// the first write replaces it (and deletes its replies).
func (n *Env) freshDurable(ctx context.Context, h *Object, pre *authority.StateRead) *pb.CallReply {
	c := h.claim(true)
	rd, err := n.load(ctx, c, pre)
	if err != nil {
		n.metrics.Durable.Loads.WithLabelValues("failed").Inc()
		return Unavailable("read the state of "+h.name, err)
	}
	n.logClaim(c, rd)
	rev := rd.StateVersion
	if rev != 0 && n.state.Name() == "etcd" { // a store beside etcd has a row from the claim itself
		n.log.Warn().Str("object", h.name).Int64("stateVersion", rev).Msg("activated a durable object that has a persisted state but no record: starting from the initial state")
	}
	if h.Dur, err = h.initialDurable(rev, 0, 0); err != nil {
		return h.Reply(pb.Code_CODE_INTERNAL, nil, err.Error())
	}
	n.metrics.Durable.Loads.WithLabelValues("empty").Inc()
	return nil
}

// claim is h's claim of its state under the fence it serves under (fresh:
// just created, nothing to restore).
func (h *Object) claim(fresh bool) statestore.Claim {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return statestore.Claim{Object: h.obj, Fence: h.Fence, Deleted: h.Rec.Snapshot(h).Record.Deleted, Fresh: fresh}
}

// logClaim puts claim c, which read rd, in the execution log.
func (n *Env) logClaim(c statestore.Claim, rd authority.StateRead) {
	if n.xlog != nil {
		n.xlog.Claim(c.Object.String(), c.Fence, rd.StateVersion, rd.Value.Seq, c.Fresh, c.Deleted, n.now())
	}
}

// limitHint says where a store's limit comes from.
func limitHint(store string) string {
	if store == "etcd" {
		return " (--durable-max-bytes; etcd's request limit bounds it)"
	}
	return ""
}

// dataLost is the answer for an object whose persisted state cannot be
// used: it is not served (and not overwritten) until an operator repairs it.
func (h *Object) dataLost(what string, err error) *pb.CallReply {
	h.env.metrics.Durable.Loads.WithLabelValues("failed").Inc()
	return h.Reply(pb.Code_CODE_DATA_LOST, nil, fmt.Sprintf("%s: %s cannot be read (%v); not served", h.name, what, err))
}

// loadDurable restores a durable object from etcd on the node that serves it
// now (h was installed fresh from its record): its state, timers and
// persisted replies, or the initial state if nothing was persisted yet. A
// value that cannot be read is refused with CODE_DATA_LOST and left as it
// is: the object is not served until an operator repairs it.
func (n *Env) loadDurable(ctx context.Context, h *Object, pre *authority.StateRead) *pb.CallReply {
	rd, r, found := h.readPersisted(ctx, pre, 0, 0, func(err error) *pb.CallReply { return Unavailable("read the state of "+h.name, err) })
	if !found {
		return r
	}
	v := rd.Value
	var err error
	var inst actor.Object
	var timers *actor.Timers
	var table, replies *actor.ReplyTable
	var outbox *actor.Outbox
	err = h.Guard("Restore", func() (err error) {
		inst, timers, table, replies, outbox, err = durable.Decode(*h.Typ, rd)
		return err
	})
	if err != nil {
		return h.dataLost(fmt.Sprintf("its persisted state (seq %d, state version %d)", v.Seq, rd.StateVersion), err)
	}
	h.Mu.Lock()
	h.Inst, h.Replies, h.Timers, h.Rem = inst, replies, timers, v.Reminders
	h.Mu.Unlock()
	h.SetOutbox(outbox) // delivered once the object is ready (hostedOrActivate)
	h.Dur = &durableState{state: v.State, timers: v.Timers, outbox: v.Outbox, table: table, stateRev: rd.StateVersion, seq: v.Seq, rem: v.Reminders}
	n.metrics.Durable.Loads.WithLabelValues("restored").Inc()
	n.log.Info().Str("object", h.name).Uint64("seq", v.Seq).Int64("stateVersion", rd.StateVersion).Int("replies", len(rd.Replies)).
		Str("writtenBy", v.Owner.String()).Int64("writtenUnderObjectGeneration", v.ObjectGeneration).Msg("restored a durable object from etcd")
	if timers != nil {
		h.Arm()
	}
	return nil
}

// readPersisted reads h's persisted state for a load: found, it is rd to
// restore from; otherwise r is the answer — nil when nothing was persisted
// yet (h.Dur is then the initial state, with a reply table of window and
// entries, 0: the node's), CODE_DATA_LOST for a value that cannot be
// read, or unavailable's answer when etcd could not be read.
func (h *Object) readPersisted(ctx context.Context, pre *authority.StateRead, window time.Duration, entries int, unavailable func(error) *pb.CallReply) (rd authority.StateRead, r *pb.CallReply, found bool) {
	n := h.env
	c := h.claim(false)
	rd, err := n.load(ctx, c, pre)
	if err == nil {
		n.logClaim(c, rd)
	}
	switch {
	case errors.Is(err, authority.ErrInvalidState):
		return rd, h.dataLost("its persisted state", err), false
	case statestore.IsFenced(err): // a newer owner claimed it: this copy is not the object any more
		n.metrics.Durable.Loads.WithLabelValues("fenced").Inc()
		h.DropDurable("fenced: " + err.Error())
		return rd, h.Reply(pb.Code_CODE_UNAVAILABLE, nil, h.name+": a newer owner holds its state; retry"), false
	case err != nil:
		n.metrics.Durable.Loads.WithLabelValues("failed").Inc()
		return rd, unavailable(err), false
	case !rd.Found: // the version is 0 in etcd, the claimed row's beside it
		if h.Dur, err = h.initialDurable(rd.StateVersion, window, entries); err != nil {
			return rd, h.Reply(pb.Code_CODE_INTERNAL, nil, err.Error()), false
		}
		n.metrics.Durable.Loads.WithLabelValues("empty").Inc()
		return rd, nil, false
	}
	return rd, nil, true
}

// EnsureDurable makes sure h.dur is known before h runs anything: a
// relocation target learns it from etcd on its first request (the commit
// gave it the object; etcd holds what the source persisted: the state it
// restored from the payload, and the persisted replies it extends). It
// returns the answer to give instead when it cannot.
func (h *Object) EnsureDurable() *pb.CallReply {
	if h.Dur != nil {
		return nil
	}
	n := h.env
	ctx, cancel := n.durableCtx()
	defer cancel()
	h.Mu.Lock()
	w, m := h.Replies.Window(), h.Replies.MaxEntries()
	h.Mu.Unlock()
	rd, r, found := h.readPersisted(ctx, nil, w, m, func(err error) *pb.CallReply {
		return h.Reply(pb.Code_CODE_UNAVAILABLE, nil, "read the state of "+h.name+": "+err.Error())
	})
	if !found {
		return r
	}
	t, err := durable.RestoreReplies(rd)
	if err != nil {
		return h.dataLost("its persisted replies", err)
	}
	v := rd.Value
	h.Dur = &durableState{state: v.State, timers: v.Timers, outbox: v.Outbox, table: t, stateRev: rd.StateVersion, seq: v.Seq, rem: v.Reminders}
	h.Mu.Lock()
	h.Rem = v.Reminders // a relocation target: the reminders are the persisted ones
	h.Mu.Unlock()
	n.metrics.Durable.Loads.WithLabelValues("restored").Inc()
	return nil
}

// persistChange persists h's state after a request (op, with its reply rec)
// or a timer fire (op nil) ran, if it changed. It returns nil when the
// change may be acknowledged (written, or nothing to write), or the answer
// to give instead; then the change is undone: rolled back (too large) or
// the instance dropped (every other failure).
func (h *Object) persistChange(op *wire.OperationID, rec actor.Reply, now time.Time) *pb.CallReply {
	n, d := h.env, h.Dur
	var state []byte
	err := h.Guard("Snapshot", func() (err error) { state, err = h.Inst.Snapshot(); return err })
	if err != nil {
		n.metrics.Durable.Writes.WithLabelValues("error").Inc()
		h.DropDurable("snapshot failed: " + err.Error())
		return h.Reply(pb.Code_CODE_INTERNAL, nil, fmt.Sprintf("%s: snapshot: %v; the change was not persisted", h.name, err))
	}
	h.Mu.Lock()
	timers := durable.EncodeTimers(h.Timers)
	outbox := h.Outbox.Encode()
	fence, version, rem := h.Fence, h.Version, h.Rem
	h.Mu.Unlock()
	fired := d.fired
	d.fired = nil
	if len(fired) == 0 && bytes.Equal(state, d.state) && bytes.Equal(timers, d.timers) && bytes.Equal(outbox, d.outbox) && slices.Equal(rem, d.rem) {
		n.metrics.Durable.Writes.WithLabelValues("unchanged").Inc()
		return nil
	}
	v := authority.StateValue{
		V: authority.StateVersion1, Object: h.name,
		ObjectGeneration: fence.ObjectGeneration, AuthorityGeneration: fence.AuthorityGeneration, Owner: fence.Owner,
		Seq: d.seq + 1, State: state, Timers: timers, Outbox: outbox, Reminders: rem,
		ReplyWindowMs: d.table.Window().Milliseconds(), ReplyMaxEntries: d.table.MaxEntries(), ReplyWatermarkMs: durable.WatermarkMs(d.table),
	}
	req := authority.PersistRequest{Object: h.obj, Fence: fence, StoreVersion: version, StateVersion: d.stateRev, State: &v, // the store encodes what it keeps
		Schedule: h.schedule(rem, d.rem, fence.ObjectGeneration)}
	advance(&req, h.name, fence.ObjectGeneration, fired, rem)
	if op != nil {
		req.Reply = &authority.StateReply{ID: durable.ReplyID(*op), Value: authority.ReplyValue{Code: rec.Code, Payload: rec.Payload, Message: rec.Message}}
	}
	if size, limit := n.state.Size(req)+durable.PersistSlack, n.state.MaxBytes(); size > limit {
		n.metrics.Durable.Writes.WithLabelValues("too_large").Inc()
		msg := fmt.Sprintf("%s: the change would persist %d bytes (state %d), over the %s state store's limit of %d%s; refused, the state is unchanged",
			h.name, size, len(state), n.state.Name(), limit, limitHint(n.state.Name()))
		if err := h.rollbackDurable(); err != nil {
			h.DropDurable("rollback failed: " + err.Error())
		}
		return h.Reply(pb.Code_CODE_STATE_TOO_LARGE, nil, msg)
	}
	if op != nil {
		d.table.Record(*op, rec, now)
		v.ReplyWatermarkMs = durable.WatermarkMs(d.table) // req.State is &v
	}
	if oldest, ok := d.table.Oldest(); ok {
		req.KeepRepliesFrom = durable.ReplyID(oldest)
	}
	ctx, cancel := n.durableCtx()
	defer cancel()
	ctx, span := calltrace.Write(ctx, h.traced, n.state.Name())
	defer span.End()
	for range 4 {
		start := n.now()
		res, err := n.state.Persist(ctx, req)
		tracing.Observe(ctx, n.metrics.Durable.Seconds, n.now().Sub(start).Seconds())
		if err != nil {
			n.metrics.Durable.Writes.WithLabelValues("uncertain").Inc()
			h.DropDurable("persist: " + err.Error())
			return h.Reply(pb.Code_CODE_UNAVAILABLE, nil, fmt.Sprintf("%s: persisting the change: %v; retry with the same operation id", h.name, err))
		}
		switch res.Outcome {
		case authority.PersistWritten:
			if n.xlog != nil {
				n.xlog.Wrote(h.name, fence, res.StateVersion, v.Seq, n.now())
			}
			n.metrics.Durable.Writes.WithLabelValues("written").Inc()
			n.metrics.Durable.Bytes.Observe(float64(req.Size()))
			d.state, d.timers, d.outbox, d.stateRev, d.seq, d.rem = state, timers, outbox, res.StateVersion, v.Seq, rem
			return nil
		case authority.PersistMoved:
			// Our own intent or preserve rewrote the record: same fence
			// (PersistState checked it), newer store version.
			n.metrics.Durable.Writes.WithLabelValues("moved").Inc()
			req.StoreVersion = res.Current.StoreVersion
			h.Mu.Lock()
			if h.Fence == fence {
				h.Version = max(h.Version, req.StoreVersion)
			}
			h.Mu.Unlock()
			continue
		case authority.PersistSuperseded:
			n.metrics.Durable.Writes.WithLabelValues("superseded").Inc()
			h.DropDurable("superseded")
			if res.Found {
				n.cache.Observe(res.Current)
				r := n.notOwner(res.Current)
				r.Message += "; this node's copy was superseded and its change not persisted: retry there with the same operation id"
				return r
			}
			return h.Reply(pb.Code_CODE_UNAVAILABLE, nil, h.name+": its record is gone; the change was not persisted")
		case authority.PersistOwnerGone:
			n.metrics.Durable.Writes.WithLabelValues("owner_gone").Inc()
			h.DropDurable("owner key gone")
			return h.Reply(pb.Code_CODE_UNAVAILABLE, nil, "owner "+fence.Owner.String()+" lost its lease: the change to "+h.name+" was not persisted")
		default: // state moved, not written
			n.metrics.Durable.Writes.WithLabelValues(durable.OutcomeLabel(res.Outcome)).Inc()
			h.DropDurable("persist " + res.Outcome.String())
			if res.NoSpace { // etcdspace.go: no write will be until the alarm is disarmed
				r := n.noSpaceReply(h.name + ": the change was not persisted: " + authority.ErrNoSpace.Error())
				return h.Reply(r.Code, nil, r.Message)
			}
			return h.Reply(pb.Code_CODE_UNAVAILABLE, nil, fmt.Sprintf("%s: the change was not persisted (%s); retry with the same operation id", h.name, res.Outcome))
		}
	}
	n.metrics.Durable.Writes.WithLabelValues("not_written").Inc()
	h.DropDurable("the record kept moving")
	return h.Reply(pb.Code_CODE_UNAVAILABLE, nil, h.name+": its record kept moving; the change was not persisted")
}

// rollbackDurable puts back the last persisted state, timers and outbox
// (the persisted reply table was not touched).
func (h *Object) rollbackDurable() error {
	d := h.Dur
	inst := h.Typ.New()
	if err := h.Guard("Restore", func() error { return inst.Restore(d.state) }); err != nil {
		return err
	}
	outbox, err := actor.DecodeOutbox(d.outbox)
	if err != nil {
		return err
	}
	var timers *actor.Timers
	if len(d.timers) > 0 {
		var err error
		if timers, err = actor.DecodeTimers(d.timers); err != nil {
			return err
		}
	}
	h.Mu.Lock()
	h.Inst, h.Timers, h.Rem = inst, timers, d.rem
	h.Mu.Unlock()
	h.SetOutbox(outbox)
	h.Arm()
	h.KickDelivery()
	return nil
}

// DropDurable stops serving h after a change that could not be persisted:
// what etcd holds is the truth, and the next call re-activates the object
// from it (on this node while the record names it, else on its owner).
func (h *Object) DropDurable(why string) {
	h.env.log.Warn().Str("object", h.name).Str("reason", why).Msg("durable object dropped: its change was not persisted")
	h.env.unhost(h)
	h.Close()
}

// durableTimerGate is called before a durable object's timers fire: it
// makes sure h.dur is known, or retries the fire in a second.
func (h *Object) durableTimerGate() bool {
	if r := h.EnsureDurable(); r == nil {
		return true
	}
	h.Mu.Lock()
	defer h.Mu.Unlock()
	if h.Closed {
		h.fireSet = false
		return false
	}
	h.fireSet = true
	h.timer = h.env.clock.AfterFunc(time.Second, func() {
		if !h.Submit(&Work{Timer: true}) {
			h.Mu.Lock()
			h.fireSet = false
			h.Mu.Unlock()
		}
	})
	return false
}

// persistTimers persists a durable object's state after its timers fired.
func (h *Object) persistTimers(now time.Time) {
	if r := h.persistChange(nil, actor.Reply{}, now); r != nil {
		h.env.log.Warn().Str("object", h.name).Str("code", wire.CodeName(r.GetCode())).Str("message", r.GetMessage()).Msg("timer fire of a durable object not persisted")
	}
}

// FreshDurable starts the durable bookkeeping of h, just activated with no
// record before it (freshDurable).
//
// pre, if not nil, is the state read in the activation's own transaction
// (StateWithRecord).
func (h *Object) FreshDurable(ctx context.Context, pre *authority.StateRead) *pb.CallReply {
	return h.env.freshDurable(ctx, h, pre)
}

// LoadDurable restores h from what etcd persisted (loadDurable).
// pre, if not nil, is the state read in the transaction that made this
// node the owner (a wake's; StateWithRecord).
func (h *Object) LoadDurable(ctx context.Context, pre *authority.StateRead) *pb.CallReply {
	return h.env.loadDurable(ctx, h, pre)
}

// StateWithRecord reports whether the state store is read in the
// transaction that makes a node the owner (statestore.WithRecord): the
// node then asks its activations and wakes to read the state.
func (n *Env) StateWithRecord() bool {
	_, ok := n.state.(statestore.WithRecord)
	return ok
}

// load is the state store's Load of c, or its answer from pre (read in
// the owner's own record write) when the store takes one.
func (n *Env) load(ctx context.Context, c statestore.Claim, pre *authority.StateRead) (authority.StateRead, error) {
	if w, ok := n.state.(statestore.WithRecord); ok && pre != nil {
		return w.LoadFrom(c, *pre)
	}
	return n.state.Load(ctx, c)
}
