package authority

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/reminder"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// ---------------------------------------------------------------- durable state

// The state of a durable object (docs/design.md §5a) lives in state/<object>,
// and the replies of its persisted changes, one key each, under
// state/<object>/replies/<operation id hex>. Both are written only by
// PersistState, one transaction per acknowledged change:
//
//	If ModRevision(authority/<obj>)=seen ∧ CreateRevision(owners/<owner>)=owner.Generation ∧ ModRevision(state/<obj>)=stateVersion
//	Then delete the replies older than the oldest one kept, put state/<obj>, put the change's reply
//	Else get authority/<obj>, state/<obj> (keys only), owners/<owner>
//
// Keeping the replies in keys of their own makes a write carry the state and
// one reply, not the whole reply table (up to 4,096 entries in its window).
//
// The authority compare fences the write: once a commit or a recovery has
// rewritten the record, the previous owner can no longer write. The owner
// key compare stops an owner whose lease is gone before anyone took over.
// The state compare makes the writer the only one who moved the state key
// since it last wrote or read it: a write of its own that etcd applied after
// the writer gave up on it (an RPC error) makes the next write fail instead
// of being overwritten silently, and the writer reloads.

// StateVersion1 is the version of StateValue's encoding.
const StateVersion1 = 1

// ErrInvalidState: a stored state value is malformed or names another
// object; nothing was restored from it.
var ErrInvalidState = wire.Sentinel(pb.Code_CODE_DATA_LOST, "authority: invalid durable state")

// StateValue is the value of state/<object>: JSON, readable with etcdctl
// (the byte fields are base64).
type StateValue struct {
	// V is StateVersion1.
	V int `json:"v"`
	// Object is the object's name, "actor/<type>/<id>".
	Object string `json:"object"`
	// ObjectGeneration, AuthorityGeneration and Owner are the fence the
	// writer served under (informational: the write itself was fenced by
	// the authority record's store version).
	ObjectGeneration    int64    `json:"objectGeneration"`
	AuthorityGeneration int64    `json:"authorityGeneration"`
	Owner               OwnerRef `json:"owner"`
	// Seq counts the writes of the object: +1 per write, continued from the
	// persisted value by every new owner. With the fence it makes every
	// written value unique, so an uncertain write is recognised by reading
	// back exactly its bytes.
	Seq uint64 `json:"seq"`
	// State is the object's Snapshot.
	State []byte `json:"state"`
	// Timers is the actor.Timers encoding (absent: no timers).
	Timers []byte `json:"timers,omitempty"`
	// The bounds and low watermark of the table of the replies of the
	// persisted changes (actor.ReplyTable), whose entries are the keys
	// under state/<object>/replies/: a retry after a crash is answered from
	// them and never executed twice, and one older than the watermark is
	// refused as expired.
	ReplyWindowMs    int64 `json:"replyWindowMs"`
	ReplyMaxEntries  int   `json:"replyMaxEntries"`
	ReplyWatermarkMs int64 `json:"replyWatermarkMs"`
	// Outbox is the actor.Outbox encoding: the messages the object sent
	// that their destinations have not answered (absent: none). Persisted
	// in the same write as the state that sent them, so an owner's crash
	// loses no message (docs/design.md §13).
	Outbox []byte `json:"outbox,omitempty"`
	// Reminders are the object's durable reminders (pkg/reminder); when
	// each comes due is in the schedule, reminders/<shard>/<due>/<id>,
	// written by the same transaction that set it.
	Reminders []reminder.Def `json:"reminders,omitempty"`
}

// ReplyValue is the value of one persisted reply (JSON; the payload base64).
type ReplyValue struct {
	// Code is a pb.Code value.
	Code    int32  `json:"code"`
	Payload []byte `json:"payload,omitempty"`
	Message string `json:"message,omitempty"`
}

// Encode is the canonical JSON of v.
func (v *ReplyValue) Encode() []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // a ReplyValue always marshals
	}
	return b
}

// StateReply is one persisted reply: its operation id, as 32 lowercase hex
// digits (so that keys sort by the ids' UUIDv7 time), and its value.
type StateReply struct {
	ID    string
	Value ReplyValue
}

// DecodeReply parses obj's persisted reply id with value b; the error
// wraps ErrInvalidState.
func DecodeReply(obj keyspace.Object, id string, b []byte) (StateReply, error) {
	var rv ReplyValue
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if !validReplyID(id) || dec.Decode(&rv) != nil {
		return StateReply{}, fmt.Errorf("%w: reply %s of %s: %q", ErrInvalidState, id, obj, b)
	}
	return StateReply{ID: id, Value: rv}, nil
}

// validReplyID reports whether id is 32 lowercase hex digits.
func validReplyID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// encoded is r with its Value (Validate: r has a Value or a State).
func (r PersistRequest) encoded() PersistRequest {
	if len(r.Value) == 0 {
		r.Value = r.State.Encode()
	}
	return r
}

// EncodedLen is len(v.Encode()), without encoding the state.
func (v *StateValue) EncodedLen() int {
	meta := *v
	meta.State = nil // "state":null
	n := len(meta.Encode())
	if v.State != nil {
		n += base64.StdEncoding.EncodedLen(len(v.State)) + len(`""`) - len("null")
	}
	return n
}

// Encode is the canonical JSON of v.
func (v *StateValue) Encode() []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // a StateValue always marshals
	}
	return b
}

// DecodeStateValue parses a stored value; every error wraps ErrInvalidState.
func DecodeStateValue(b []byte) (StateValue, error) {
	var v StateValue
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return StateValue{}, fmt.Errorf("%w: %v", ErrInvalidState, err)
	}
	switch {
	case v.V != StateVersion1:
		return StateValue{}, fmt.Errorf("%w: version %d, want %d", ErrInvalidState, v.V, StateVersion1)
	case v.ObjectGeneration <= 0 || v.AuthorityGeneration <= 0:
		return StateValue{}, fmt.Errorf("%w: generations must be positive", ErrInvalidState)
	case v.ReplyWindowMs <= 0 || v.ReplyMaxEntries <= 0 || v.ReplyWatermarkMs < 0:
		return StateValue{}, fmt.Errorf("%w: reply table bounds %d ms, %d entries, watermark %d", ErrInvalidState, v.ReplyWindowMs, v.ReplyMaxEntries, v.ReplyWatermarkMs)
	}
	if _, err := keyspace.ParseObject(v.Object); err != nil {
		return StateValue{}, fmt.Errorf("%w: %v", ErrInvalidState, err)
	}
	if err := reminder.Validate(v.Reminders); err != nil {
		return StateValue{}, fmt.Errorf("%w: %v", ErrInvalidState, err)
	}
	return v, nil
}

// StateRead is the state key and the persisted replies as read.
type StateRead struct {
	// Found is false when the object has no persisted state.
	Found bool
	Value StateValue
	// Replies are the persisted replies, oldest first.
	Replies []StateReply
	// StateVersion is the ModRevision of state/<object> (0: absent).
	StateVersion int64
	// Revision the read was made at.
	Revision int64
}

// ReadState reads an object's persisted state and replies at one revision.
// A value that cannot be decoded, or that names another object, is an
// error wrapping ErrInvalidState (with StateVersion set, so that the caller
// may decide to overwrite it).
func (s *Store) ReadState(ctx context.Context, obj keyspace.Object) (StateRead, error) {
	if err := obj.Validate(); err != nil {
		return StateRead{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	resp, err := s.c.Txn(ctx).Then(s.stateGets(obj)...).Commit()
	if err != nil {
		return StateRead{}, fmt.Errorf("authority: read state of %s: %w", obj, err)
	}
	return s.stateFrom(obj, resp.Responses, resp.Header.Revision)
}

// stateGets are the reads of obj's state and persisted replies (stateFrom
// decodes their answers).
func (s *Store) stateGets(obj keyspace.Object) []clientv3.Op {
	return []clientv3.Op{clientv3.OpGet(s.keys.State(obj)), clientv3.OpGet(s.keys.StateReplies(obj), clientv3.WithPrefix())}
}

// stateFrom decodes the answers of stateGets(obj), read at rev.
func (s *Store) stateFrom(obj keyspace.Object, rs []*etcdserverpb.ResponseOp, rev int64) (StateRead, error) {
	r := StateRead{Revision: rev}
	kvs := rs[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return r, nil
	}
	r.StateVersion = kvs[0].ModRevision
	v, err := DecodeStateValue(kvs[0].Value)
	if err != nil {
		return r, fmt.Errorf("state of %s: %w", obj, err)
	}
	if v.Object != obj.String() {
		return r, fmt.Errorf("%w: state of %s names %s", ErrInvalidState, obj, v.Object)
	}
	prefix := s.keys.StateReplies(obj)
	for _, kv := range rs[1].GetResponseRange().GetKvs() {
		rep, err := DecodeReply(obj, strings.TrimPrefix(string(kv.Key), prefix), kv.Value)
		if err != nil {
			return r, err
		}
		r.Replies = append(r.Replies, rep)
	}
	r.Found, r.Value = true, v
	return r, nil
}

// ReadStateVersion returns the ModRevision of state/<object> (0: absent)
// without reading its value.
func (s *Store) ReadStateVersion(ctx context.Context, obj keyspace.Object) (int64, error) {
	if err := obj.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	resp, err := s.c.Get(ctx, s.keys.State(obj), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("authority: read state version of %s: %w", obj, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].ModRevision, nil
}

// PersistRequest writes a durable object's state under the authority fence.
type PersistRequest struct {
	Object keyspace.Object
	// Fence is what the writer serves the object under: its owner pair and
	// both generations, as in its authority record.
	Fence Fence
	// StoreVersion is the ModRevision of the authority record the fence was
	// taken from.
	StoreVersion int64
	// StateVersion is the ModRevision of state/<object> the writer last
	// wrote or read (0: the key did not exist).
	StateVersion int64
	// Value is the encoded StateValue; empty, PersistState encodes State
	// (a writer need not encode what a store that keeps the parts apart
	// never reads: a large state's base64 JSON is costly).
	Value []byte
	// State is the StateValue Value encodes: a store that keeps its parts
	// apart (pkg/statestore/postgres) writes from it.
	State *StateValue
	// Reply is the reply of the change to persist with it (nil: none, e.g.
	// a timer fire).
	Reply *StateReply
	// KeepRepliesFrom is the id of the oldest persisted reply to keep (the
	// oldest entry of the writer's table, Reply's or older): every reply
	// before it is deleted. Empty: none is kept.
	KeepRepliesFrom string
	// Schedule are the schedule entries of the reminders this write sets
	// (pkg/reminder), written with it.
	Schedule []reminder.Scheduled
	// Unschedule are the schedule entries this write removes: the due
	// times its turn fired (reminder.After; their Value is unused). So a
	// firing and its entry's advance are one transaction.
	Unschedule []reminder.Scheduled
}

// Size is the size of what the write carries: the value and the reply.
func (r PersistRequest) Size() int {
	n := len(r.Value)
	if n == 0 && r.State != nil {
		n = r.State.EncodedLen()
	}
	if r.Reply != nil {
		n += len(r.Reply.Value.Encode()) + len(r.Reply.ID)
	}
	for _, e := range r.Schedule {
		n += len(e.Value) + 64
	}
	return n + 64*len(r.Unschedule)
}

func (r PersistRequest) Validate() error {
	if err := r.Object.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	switch {
	case keyspace.ValidateOwnerID(r.Fence.Owner.ID) != nil || r.Fence.Owner.Generation <= 0:
		return fmt.Errorf("%w: persist by owner %v", ErrInvalidRequest, r.Fence.Owner)
	case r.Fence.ObjectGeneration <= 0 || r.Fence.AuthorityGeneration <= 0:
		return fmt.Errorf("%w: persist under generations o%d/a%d", ErrInvalidRequest, r.Fence.ObjectGeneration, r.Fence.AuthorityGeneration)
	case r.StoreVersion <= 0 || r.StateVersion < 0:
		return fmt.Errorf("%w: persist at store version %d, state version %d", ErrInvalidRequest, r.StoreVersion, r.StateVersion)
	case len(r.Value) == 0 && r.State == nil:
		return fmt.Errorf("%w: persist of an empty value", ErrInvalidRequest)
	case r.KeepRepliesFrom != "" && !validReplyID(r.KeepRepliesFrom):
		return fmt.Errorf("%w: persist keeping replies from %q (want 32 lowercase hex digits)", ErrInvalidRequest, r.KeepRepliesFrom)
	case r.Reply != nil && (!validReplyID(r.Reply.ID) || r.KeepRepliesFrom == "" || r.KeepRepliesFrom > r.Reply.ID):
		return fmt.Errorf("%w: persist of reply %q keeping replies from %q", ErrInvalidRequest, r.Reply.ID, r.KeepRepliesFrom)
	case len(r.Schedule) > actor.MaxReminders || len(r.Unschedule) > actor.MaxReminders:
		return fmt.Errorf("%w: persist scheduling %d reminders, removing %d", ErrInvalidRequest, len(r.Schedule), len(r.Unschedule))
	}
	for _, e := range slices.Concat(r.Schedule, r.Unschedule) {
		if e.Shard < 0 || e.Shard >= reminder.Shards || e.DueMs <= 0 || !validReplyID(e.ID) {
			return fmt.Errorf("%w: persist scheduling a reminder in shard %d at %d (id %q)", ErrInvalidRequest, e.Shard, e.DueMs, e.ID)
		}
	}
	return nil
}

// PersistOutcome says what happened to a PersistState.
type PersistOutcome int

const (
	// PersistWritten: the value is in etcd.
	PersistWritten PersistOutcome = 1 + iota
	// PersistMoved: not written; the record still names the writer under
	// the same fence but at another store version (the writer's own intent
	// or preserve rewrote it). Write again with Current.StoreVersion.
	PersistMoved
	// PersistSuperseded: not written; the record names another owner or
	// another generation, or is gone. The writer is no longer the owner:
	// it must not acknowledge the change, and must drop the object.
	PersistSuperseded
	// PersistOwnerGone: not written; the writer's owner key is gone (its
	// lease ended): it is fenced.
	PersistOwnerGone
	// PersistStateMoved: not written; state/<object> is at another version
	// than StateVersion (a write the writer gave up on landed after all).
	// The writer's copy may differ from etcd's: it must reload.
	PersistStateMoved
	// PersistNotWritten: an RPC error, and the read-back shows neither the
	// value nor a reason why it could not be written. The write may still
	// land later (then the next write gets PersistStateMoved).
	PersistNotWritten
)

func (o PersistOutcome) String() string {
	switch o {
	case PersistWritten:
		return "written"
	case PersistMoved:
		return "moved"
	case PersistSuperseded:
		return "superseded"
	case PersistOwnerGone:
		return "owner-gone"
	case PersistStateMoved:
		return "state-moved"
	case PersistNotWritten:
		return "not-written"
	}
	return fmt.Sprintf("PersistOutcome(%d)", int(o))
}

// PersistResult is the outcome of PersistState.
type PersistResult struct {
	Outcome PersistOutcome
	// StateVersion is the ModRevision of state/<object> after the write
	// (Written), or as read (0: absent).
	StateVersion int64
	// Current is the authority record as read when not written (Found=false:
	// absent); the written-under record otherwise is the caller's.
	Current Snapshot
	Found   bool
	// Revision of the write, or of the read that decided.
	Revision int64
	// Resolved is true when decided by a read-back after an RPC error.
	Resolved bool
	// NoSpace: etcd refused the write for want of space (its NOSPACE
	// alarm) and the read-back found it not written (nospace.go).
	NoSpace bool
}

// PersistState writes req.Value to state/<object> (see the transaction
// above). A failed compare is not an error: the result says which one
// failed, with the current record. An RPC error is resolved by reading back
// exactly the value; if that read fails too, the error wraps ErrUncertain
// and the caller must resolve again (ResolvePersist) or treat its copy as
// unknown.
func (s *Store) PersistState(ctx context.Context, req PersistRequest) (PersistResult, error) {
	if err := req.Validate(); err != nil {
		return PersistResult{}, err
	}
	req = req.encoded()
	authKey, stateKey, ownerKey := s.keys.Authority(req.Object), s.keys.State(req.Object), s.keys.Owner(req.Fence.Owner.ID)
	prefix := s.keys.StateReplies(req.Object)
	prune := clientv3.OpDelete(prefix, clientv3.WithPrefix())
	if req.KeepRepliesFrom != "" {
		prune = clientv3.OpDelete(prefix, clientv3.WithRange(prefix+req.KeepRepliesFrom))
	}
	ops := []clientv3.Op{prune, clientv3.OpPut(stateKey, string(req.Value))}
	if req.Reply != nil {
		ops = append(ops, clientv3.OpPut(prefix+req.Reply.ID, string(req.Reply.Value.Encode())))
	}
	ops = append(ops, s.scheduleOps(req)...)
	resp, err := s.c.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(authKey), "=", req.StoreVersion),
		clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", req.Fence.Owner.Generation),
		clientv3.Compare(clientv3.ModRevision(stateKey), "=", req.StateVersion),
	).Then(ops...).Else(
		clientv3.OpGet(authKey), clientv3.OpGet(stateKey, clientv3.WithKeysOnly()), clientv3.OpGet(ownerKey, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		res, rerr := s.ResolvePersist(ctx, req)
		if rerr != nil {
			return PersistResult{}, fmt.Errorf("%w: persist %s: %w (read-back: %w)", ErrUncertain, req.Object, err, rerr)
		}
		res.NoSpace = res.Outcome == PersistNotWritten && IsNoSpace(err)
		return res, nil
	}
	if resp.Succeeded {
		return PersistResult{Outcome: PersistWritten, StateVersion: resp.Header.Revision, Revision: resp.Header.Revision}, nil
	}
	return s.judgePersist(req, resp, false)
}

// ResolvePersist decides an uncertain PersistState by one read at one
// revision: written iff state/<object> holds exactly req.Value (every value
// is unique: StateValue.Seq); otherwise the reason it could not be, or
// PersistNotWritten.
func (s *Store) ResolvePersist(ctx context.Context, req PersistRequest) (PersistResult, error) {
	if err := req.Validate(); err != nil {
		return PersistResult{}, err
	}
	req = req.encoded()
	authKey, stateKey, ownerKey := s.keys.Authority(req.Object), s.keys.State(req.Object), s.keys.Owner(req.Fence.Owner.ID)
	resp, err := s.c.Txn(ctx).Then(
		clientv3.OpGet(authKey), clientv3.OpGet(stateKey), clientv3.OpGet(ownerKey, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return PersistResult{}, fmt.Errorf("authority: read back state of %s: %w", req.Object, err)
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 && bytes.Equal(kvs[0].Value, req.Value) {
		return PersistResult{Outcome: PersistWritten, StateVersion: kvs[0].ModRevision, Revision: resp.Header.Revision, Resolved: true}, nil
	}
	return s.judgePersist(req, resp, true)
}

// judgePersist classifies a write that did not happen from the gets of
// authority/, state/ and owners/ (in that order) at one revision.
func (s *Store) judgePersist(req PersistRequest, resp *clientv3.TxnResponse, resolved bool) (PersistResult, error) {
	res := PersistResult{Revision: resp.Header.Revision, Resolved: resolved}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		snap, err := s.snapshot(kvs[0], resp.Header.Revision)
		if err != nil {
			return PersistResult{}, err
		}
		res.Current, res.Found = snap, true
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		res.StateVersion = kvs[0].ModRevision
	}
	ownerAlive := false
	if kvs := resp.Responses[2].GetResponseRange().GetKvs(); len(kvs) > 0 {
		ownerAlive = kvs[0].CreateRevision == req.Fence.Owner.Generation
	}
	switch {
	case !res.Found || res.Current.Fence() != req.Fence:
		res.Outcome = PersistSuperseded
	case !ownerAlive:
		res.Outcome = PersistOwnerGone
	case res.Current.StoreVersion != req.StoreVersion:
		res.Outcome = PersistMoved
	case res.StateVersion != req.StateVersion:
		res.Outcome = PersistStateMoved
	default:
		res.Outcome = PersistNotWritten
	}
	return res, nil
}
