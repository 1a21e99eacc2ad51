package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/verify/bulkaudit"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// AuditEvent is one change of a key under the cluster's prefix, as the
// watch delivered it.
type AuditEvent struct {
	Revision       int64
	Key            string
	Delete         bool
	Value          []byte
	CreateRevision int64
	ModRevision    int64
}

// FenceKey names one fence of one object.
type FenceKey struct {
	Object              string `json:"object"`
	ObjectGeneration    int64  `json:"objectGeneration"`
	AuthorityGeneration int64  `json:"authorityGeneration"`
}

func (k FenceKey) String() string {
	return fmt.Sprintf("%s o%d/a%d", k.Object, k.ObjectGeneration, k.AuthorityGeneration)
}

// Grant is the owner etcd's record named for a fence, from the revision it
// was first written.
type Grant struct {
	Owner    record.OwnerRef `json:"owner"`
	Revision int64           `json:"revision"`
}

// Transition is one write of an authority record, classified.
type Transition struct {
	Revision int64 `json:"revision"`
	Object   string
	// Kind: activate, intent, preserve, commit, recover, rewrite.
	Kind   string         `json:"kind"`
	Prev   *record.Record `json:"prev,omitempty"`
	Record record.Record  `json:"record"`
}

// Recovery is one re-creation of an object whose owner had died with it
// (§3 recover): the state of object generation From, and its
// de-duplication table, were lost and declared lost to callers.
type Recovery struct {
	From      int64           `json:"fromObjectGeneration"`
	To        int64           `json:"toObjectGeneration"`
	Revision  int64           `json:"revision"`
	DeadOwner record.OwnerRef `json:"deadOwner"`
	NewOwner  record.OwnerRef `json:"newOwner"`
}

// AuditResult is what the audit found.
type AuditResult struct {
	FromRevision int64 `json:"fromRevision"`
	ToRevision   int64 `json:"toRevision"`
	Events       int   `json:"events"`
	// Transitions by kind.
	Transitions map[string]int `json:"transitions"`
	// Commits by relocation id.
	Commits map[string]Transition `json:"-"`
	// Fences: every fence any authority record held, and to whom.
	Fences map[FenceKey]Grant `json:"-"`
	// Records at ToRevision, by object.
	Records map[string]record.Record `json:"-"`
	// Recoveries by object, in revision order: only those made while the
	// old owner was not alive (a recovery from a live owner is a
	// two-owners violation, not a declared loss).
	Recoveries map[string][]Recovery `json:"-"`
	// TwoOwnerWindows: fences granted to two different owners, and records
	// handed to a new owner while the old one was alive (recover).
	TwoOwnerWindows int `json:"twoOwnerWindows"`
	// GroupSplits: revisions at which a group's member had another owner
	// than its group, or the two sides of a membership disagreed
	// (audit_groups.go).
	GroupSplits int         `json:"groupSplits"`
	Violations  []Violation `json:"violations,omitempty"`
	// Err says why the audit is incomplete (watch compacted or cut); its
	// "not found" checks are then skipped.
	Err string `json:"err,omitempty"`
}

// Complete reports whether the audit saw every revision of the run.
func (a *AuditResult) Complete() bool { return a != nil && a.Err == "" }

// Superseded reports whether the audit saw object generation from of obj
// replaced by a recovery, at an object generation up to to: its state was
// lost and declared lost.
func (a *AuditResult) Superseded(obj string, from, to int64) (Recovery, bool) {
	if a == nil {
		return Recovery{}, false
	}
	for _, r := range a.Recoveries[obj] {
		if r.From == from && r.To <= to {
			return r, true
		}
	}
	return Recovery{}, false
}

type auditRecord struct {
	rec record.Record
	mod int64
}

// Replayer replays authority and owner key changes in revision order and
// checks every authority write (docs/design.md §3, §9):
//
//   - object and authority generations never decrease;
//   - same generations ⇒ same owner (intent, preserve, rewrite), written
//     while that owner was alive;
//   - authority generation +1 with the same object generation is a commit:
//     from a relocating record whose intent names the new owner and the
//     relocation the new record names, to an owner alive at that revision;
//   - a larger object generation is a recovery: authority generation +1, the
//     old owner no longer alive, the new one alive;
//   - a new record starts at authority generation 1, owned by a live owner;
//   - a record is deleted only from an actor outside any group that is
//     active or asleep, not relocating (Context.Delete, meshctl delete:
//     docs/developing/lifecycle.md); the name's next record starts at a
//     larger object generation;
//   - one fence (object, object generation, authority generation) is never
//     held by two owners.
type Replayer struct {
	keys    keyspace.Keys
	records map[string]auditRecord
	lastGen map[string]int64 // largest object generation seen per object
	owners  map[string]int64 // owner id → CreateRevision of its live key
	res     *AuditResult
	groups  groupAudit // audit_groups.go
	bulks   *bulkaudit.Index
}

// NewReplayer starts an empty replay.
func NewReplayer(keys keyspace.Keys) *Replayer {
	return &Replayer{keys: keys, bulks: bulkaudit.New(keys), records: map[string]auditRecord{}, lastGen: map[string]int64{}, owners: map[string]int64{},
		res: &AuditResult{Transitions: map[string]int{}, Commits: map[string]Transition{}, Fences: map[FenceKey]Grant{}, Recoveries: map[string][]Recovery{}}}
}

// Load sets the state at revision rev (the keys as read then), before the
// first replayed event.
func (r *Replayer) Load(rev int64, kvs []AuditEvent) {
	r.res.FromRevision = rev
	r.res.ToRevision = rev
	for _, kv := range kvs {
		if id, ok := r.ownerID(kv.Key); ok {
			r.owners[id] = kv.CreateRevision
			continue
		}
		r.bulks.Apply(kv.Key, kv.Value, false) // relocations/: no record
		obj, ok := r.object(kv.Key)
		if !ok {
			continue
		}
		rec, err := record.DecodeRecord(kv.Value)
		if err != nil {
			r.violate("bad-record", obj, fmt.Sprintf("revision %d: %v", kv.ModRevision, err))
			continue
		}
		r.records[obj] = auditRecord{rec: rec, mod: kv.ModRevision}
		r.lastGen[obj] = rec.ObjectGeneration
		r.grant(obj, rec, kv.ModRevision)
		r.groupsLoaded(obj, rec)
	}
}

func (r *Replayer) ownerID(key string) (string, bool) {
	if !strings.HasPrefix(key, r.keys.OwnersPrefix()) {
		return "", false
	}
	id, err := r.keys.ParseOwner(key)
	return id, err == nil
}

func (r *Replayer) object(key string) (string, bool) {
	if !strings.HasPrefix(key, r.keys.AuthorityPrefix()) {
		return "", false
	}
	return strings.TrimPrefix(key, r.keys.AuthorityPrefix()), true
}

func (r *Replayer) violate(check, obj, detail string) {
	r.res.Violations = append(r.res.Violations, Violation{Check: check, Object: obj, Detail: detail})
}

func (r *Replayer) alive(o record.OwnerRef) bool {
	g, ok := r.owners[o.ID]
	return ok && g == o.Generation
}

func (r *Replayer) grant(obj string, rec record.Record, rev int64) {
	k := FenceKey{Object: obj, ObjectGeneration: rec.ObjectGeneration, AuthorityGeneration: rec.AuthorityGeneration}
	if g, ok := r.res.Fences[k]; ok {
		if g.Owner != rec.Owner {
			r.res.TwoOwnerWindows++
			r.violate("two-owners", obj, fmt.Sprintf("revision %d: fence o%d/a%d given to %s; revision %d gave it to %s",
				rev, rec.ObjectGeneration, rec.AuthorityGeneration, rec.Owner, g.Revision, g.Owner))
		}
		return
	}
	r.res.Fences[k] = Grant{Owner: rec.Owner, Revision: rev}
}

// Apply replays one event (events in revision order).
func (r *Replayer) Apply(ev AuditEvent) {
	r.groupsAt(ev.Revision) // the previous revision is complete: check its groups
	r.res.Events++
	r.res.ToRevision = max(r.res.ToRevision, ev.Revision)
	if id, ok := r.ownerID(ev.Key); ok {
		if ev.Delete {
			delete(r.owners, id)
		} else {
			r.owners[id] = ev.CreateRevision
		}
		return
	}
	r.bulks.Apply(ev.Key, ev.Value, ev.Delete) // relocations/: no record
	obj, ok := r.object(ev.Key)
	if !ok {
		return
	}
	prev, had := r.records[obj]
	if ev.Delete {
		p := prev.rec
		switch {
		case !had:
		case p.Kind != keyspace.KindActor || p.Group != "" || len(p.Members) > 0:
			r.violate("record-deleted", obj, fmt.Sprintf("revision %d: a group's record, or a member's, was deleted", ev.Revision))
		case p.State == record.StateRelocating || p.Intent != nil:
			r.violate("record-deleted", obj, fmt.Sprintf("revision %d: the record was deleted in a relocation", ev.Revision))
		}
		r.res.Transitions["delete"]++
		delete(r.records, obj)
		r.groupsChanged(obj, prev.rec, nil)
		return
	}
	rec, err := record.DecodeRecord(ev.Value)
	if err != nil {
		r.violate("bad-record", obj, fmt.Sprintf("revision %d: %v", ev.Revision, err))
		return
	}
	at := fmt.Sprintf("revision %d", ev.Revision)
	kind := ""
	if !had {
		kind = "activate"
		switch {
		case rec.AuthorityGeneration != 1:
			r.violate("activate", obj, fmt.Sprintf("%s: a new record at authority generation %d", at, rec.AuthorityGeneration))
		case rec.ObjectGeneration <= r.lastGen[obj]:
			r.violate("generation-decreased", obj, fmt.Sprintf("%s: a new record at object generation %d, after %d", at, rec.ObjectGeneration, r.lastGen[obj]))
		}
		if !r.alive(rec.Owner) {
			r.violate("dead-owner", obj, fmt.Sprintf("%s: activated on %s, which is not alive", at, rec.Owner))
		}
	} else {
		p := prev.rec
		dObj, dAut := rec.ObjectGeneration-p.ObjectGeneration, rec.AuthorityGeneration-p.AuthorityGeneration
		switch {
		case dObj < 0 || dObj == 0 && dAut < 0:
			kind = "invalid"
			r.violate("generation-decreased", obj, fmt.Sprintf("%s: o%d/a%d after o%d/a%d", at, rec.ObjectGeneration, rec.AuthorityGeneration, p.ObjectGeneration, p.AuthorityGeneration))
		case dObj == 0 && dAut == 0:
			switch {
			case p.State == record.StateActive && rec.State == record.StateRelocating:
				kind = "intent"
			case p.State == record.StateRelocating && rec.State == record.StateActive:
				kind = "preserve"
				if p.Intent != nil && rec.LastRelocation != p.Intent.RelocationID {
					r.violate("preserve", obj, fmt.Sprintf("%s: preserve names relocation %q, the intent was %q", at, rec.LastRelocation, p.Intent.RelocationID))
				}
			default:
				kind = "rewrite"
			}
			if rec.Owner != p.Owner {
				r.res.TwoOwnerWindows++
				r.violate("two-owners", obj, fmt.Sprintf("%s: owner %s → %s without a new authority generation (o%d/a%d)", at, p.Owner, rec.Owner, rec.ObjectGeneration, rec.AuthorityGeneration))
			} else if !r.alive(rec.Owner) {
				r.violate("dead-owner", obj, fmt.Sprintf("%s: %s record written while %s is not alive", at, kind, rec.Owner))
			}
		case dObj == 0 && dAut == 1 && rec.Asleep():
			kind = "sleep"
			if p.State != record.StateActive {
				r.violate("sleep", obj, fmt.Sprintf("%s: put to sleep from a record in state %s", at, p.State))
			} else if !r.alive(p.Owner) {
				r.violate("dead-owner", obj, fmt.Sprintf("%s: put to sleep by %s, which is not alive", at, p.Owner))
			}
		case dObj == 0 && dAut == 1 && p.Asleep():
			kind = "wake"
			if !r.alive(rec.Owner) {
				r.violate("dead-owner", obj, fmt.Sprintf("%s: woken on %s, which is not alive", at, rec.Owner))
			}
		case dObj == 0 && dAut == 1:
			kind = "commit"
			switch {
			case (p.State != record.StateRelocating || p.Intent == nil) && r.bulks.Intended(obj, prev.mod, rec): // in a bulk intent
			case p.State != record.StateRelocating || p.Intent == nil:
				r.violate("commit", obj, fmt.Sprintf("%s: owner %s → %s from a record with no relocation intent", at, p.Owner, rec.Owner))
			case p.Intent.Target != rec.Owner:
				r.violate("commit", obj, fmt.Sprintf("%s: committed to %s, the intent named %s", at, rec.Owner, p.Intent.Target))
			case p.Intent.RelocationID != rec.LastRelocation:
				r.violate("commit", obj, fmt.Sprintf("%s: commit names relocation %q, the intent was %q", at, rec.LastRelocation, p.Intent.RelocationID))
			}
			if rec.Owner == p.Owner {
				r.violate("commit", obj, fmt.Sprintf("%s: committed to its own owner %s", at, rec.Owner))
			}
			if !r.alive(rec.Owner) {
				r.violate("dead-owner", obj, fmt.Sprintf("%s: committed to %s, which is not alive", at, rec.Owner))
			}
			if rec.LastRelocation != "" {
				pr := p
				r.res.Commits[rec.LastRelocation] = Transition{Revision: ev.Revision, Object: obj, Kind: kind, Prev: &pr, Record: rec}
			}
		case dObj == 0:
			kind = "invalid"
			r.violate("generation-jump", obj, fmt.Sprintf("%s: authority generation %d → %d", at, p.AuthorityGeneration, rec.AuthorityGeneration))
		default:
			kind = "recover"
			if dAut != 1 {
				r.violate("generation-jump", obj, fmt.Sprintf("%s: recovery moved the authority generation %d → %d", at, p.AuthorityGeneration, rec.AuthorityGeneration))
			}
			if r.alive(p.Owner) {
				r.res.TwoOwnerWindows++
				r.violate("two-owners", obj, fmt.Sprintf("%s: re-created on %s (o%d) while its owner %s was alive", at, rec.Owner, rec.ObjectGeneration, p.Owner))
			} else {
				r.res.Recoveries[obj] = append(r.res.Recoveries[obj], Recovery{From: p.ObjectGeneration, To: rec.ObjectGeneration,
					Revision: ev.Revision, DeadOwner: p.Owner, NewOwner: rec.Owner})
			}
			if !r.alive(rec.Owner) {
				r.violate("dead-owner", obj, fmt.Sprintf("%s: re-created on %s, which is not alive", at, rec.Owner))
			}
		}
	}
	r.res.Transitions[kind]++
	if had {
		r.groupsChanged(obj, prev.rec, &rec)
	} else {
		r.groupsChanged(obj, record.Record{}, &rec)
	}
	r.records[obj] = auditRecord{rec: rec, mod: ev.ModRevision}
	r.lastGen[obj] = max(r.lastGen[obj], rec.ObjectGeneration)
	r.grant(obj, rec, ev.Revision)
}

// Result returns the audit so far (the caller must not replay more after).
func (r *Replayer) Result() *AuditResult {
	r.groupsAt(0)
	r.res.Records = map[string]record.Record{}
	for o, a := range r.records {
		r.res.Records[o] = a.rec
	}
	return r.res
}

// compare checks the replayed authority records against a range read at
// the same revision: the watch alone is not trusted.
func (r *Replayer) compare(kvs []AuditEvent) {
	got := map[string]AuditEvent{}
	for _, kv := range kvs {
		if obj, ok := r.object(kv.Key); ok {
			got[obj] = kv
		}
	}
	for obj, a := range r.records {
		kv, ok := got[obj]
		switch {
		case !ok:
			r.violate("watch-vs-range", obj, "replayed record absent from the range read")
		case kv.ModRevision != a.mod || !bytes.Equal(kv.Value, a.rec.Encode()):
			r.violate("watch-vs-range", obj, fmt.Sprintf("replayed record of revision %d, range read has revision %d", a.mod, kv.ModRevision))
		}
		delete(got, obj)
	}
	for obj := range got {
		r.violate("watch-vs-range", obj, "record in the range read that the watch never delivered")
	}
}

// ---------------------------------------------------------------- watch

// Audit follows etcd's history of the cluster's keys with a watch and
// replays it (Replayer). It needs every revision from its start until its
// watch has delivered it: a compaction that passes a watch fallen behind
// (or a fromRevision already compacted) ends the audit with an error, never
// a silent gap. locationd's embedded etcd keeps a minute of history (its
// --etcd-compaction-retention; 0 keeps it all).
type Audit struct {
	c    *clientv3.Client
	keys keyspace.Keys
	rep  *Replayer
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}

	mu       sync.Mutex
	caughtUp int64 // every event up to this revision was applied
	err      error
	changed  chan struct{}
}

// StartAudit reads the keys under the cluster's prefix and watches them
// from the next revision. fromRevision > 0 starts from that revision
// instead (1: etcd's whole history), reading the state just before it.
func StartAudit(ctx context.Context, c *clientv3.Client, keys keyspace.Keys, fromRevision int64) (*Audit, error) {
	rep := NewReplayer(keys)
	var rev int64
	if fromRevision <= 0 {
		resp, err := c.Get(ctx, keys.Base(), clientv3.WithPrefix())
		if err != nil {
			return nil, fmt.Errorf("audit: read: %w", err)
		}
		rev = resp.Header.Revision
		rep.Load(rev, kvEvents(resp.Kvs, rev))
	} else if fromRevision > 1 {
		rev = fromRevision - 1
		resp, err := c.Get(ctx, keys.Base(), clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			return nil, fmt.Errorf("audit: read at %d: %w", rev, err)
		}
		rep.Load(rev, kvEvents(resp.Kvs, rev))
	} else {
		rep.Load(0, nil)
	}
	wctx, stop := context.WithCancel(context.Background())
	a := &Audit{c: c, keys: keys, rep: rep, ctx: wctx, stop: stop, done: make(chan struct{}), caughtUp: rev, changed: make(chan struct{})}
	wch := c.Watch(wctx, keys.Base(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	go a.follow(wch)
	return a, nil
}

func kvEvents(kvs []*mvccpb.KeyValue, rev int64) []AuditEvent {
	out := make([]AuditEvent, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, AuditEvent{Revision: rev, Key: string(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision})
	}
	return out
}

func (a *Audit) follow(wch clientv3.WatchChan) {
	defer close(a.done)
	for resp := range wch {
		if err := resp.Err(); err != nil {
			a.setErr(fmt.Errorf("audit: watch: %w", err))
			return
		}
		a.mu.Lock()
		for _, ev := range resp.Events {
			a.rep.Apply(AuditEvent{Revision: ev.Kv.ModRevision, Key: string(ev.Kv.Key), Delete: ev.Type == clientv3.EventTypeDelete,
				Value: ev.Kv.Value, CreateRevision: ev.Kv.CreateRevision, ModRevision: ev.Kv.ModRevision})
			a.caughtUp = max(a.caughtUp, ev.Kv.ModRevision)
		}
		if resp.IsProgressNotify() {
			a.caughtUp = max(a.caughtUp, resp.Header.Revision)
		}
		close(a.changed)
		a.changed = make(chan struct{})
		a.mu.Unlock()
	}
	if a.ctx.Err() == nil {
		a.setErr(errors.New("audit: the watch ended"))
	}
}

func (a *Audit) setErr(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// Stop waits until the audit has applied every revision up to etcd's current
// one (bounded by ctx), stops the watch, compares the replay with a range
// read at that revision and returns the result.
func (a *Audit) Stop(ctx context.Context) *AuditResult {
	defer func() {
		a.stop()
		<-a.done
	}()
	var target int64
	resp, err := a.c.Get(ctx, a.keys.Base()+"\x00", clientv3.WithCountOnly())
	if err == nil {
		target = resp.Header.Revision
	}
	for err == nil {
		a.mu.Lock()
		reached, werr, ch := a.caughtUp, a.err, a.changed
		a.mu.Unlock()
		if werr != nil {
			err = werr
			break
		}
		if reached >= target {
			break
		}
		_ = a.c.RequestProgress(a.ctx)
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			err = fmt.Errorf("audit: caught up to revision %d of %d: %w", reached, target, ctx.Err())
		}
		t.Stop()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		at := a.caughtUp
		if r, gerr := a.c.Get(ctx, a.keys.AuthorityPrefix(), clientv3.WithPrefix(), clientv3.WithRev(at)); gerr == nil {
			a.rep.compare(kvEvents(r.Kvs, at))
		} else {
			err = fmt.Errorf("audit: range read at %d: %w", at, gerr)
		}
	}
	res := a.rep.Result()
	res.ToRevision = max(res.ToRevision, a.caughtUp)
	if err != nil {
		res.Err = err.Error()
	}
	sort.SliceStable(res.Violations, func(i, j int) bool { return res.Violations[i].Object < res.Violations[j].Object })
	return res
}
