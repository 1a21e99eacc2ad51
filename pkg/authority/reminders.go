package authority

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/reminder"
)

// ---------------------------------------------------------------- reminder schedule

// The schedule of durable reminders (pkg/reminder) is one key per due time
// to fire, reminders/<shard>/<due ms>/<id>, put by the transaction that
// set the reminder (PersistState). The node that fires a shard reads what
// is due with one range from the shard's start (DueReminders) and fires
// each entry as a request to its object. The transaction that persists
// the firing replaces the entry by its next due time, or removes it
// (PersistRequest.Unschedule). An entry whose firing is not persisted (too
// large a change, a reminder gone) is advanced or removed by the node that
// sent it (AdvanceReminder): one transaction that compares the entry's
// ModRevision, so a change made since it was read wins.

// scheduleOps are the puts of req's Schedule and the deletes of its
// Unschedule, each key once (etcd refuses a transaction that writes a key
// twice): a put wins over a delete of its key.
func (s *Store) scheduleOps(req PersistRequest) []clientv3.Op {
	ops := make([]clientv3.Op, 0, len(req.Schedule)+len(req.Unschedule))
	seen := make(map[string]bool, cap(ops))
	for _, e := range req.Schedule {
		if k := s.keys.Reminder(e.Shard, e.DueMs, e.ID); !seen[k] {
			seen[k] = true
			ops = append(ops, clientv3.OpPut(k, string(e.Value)))
		}
	}
	for _, e := range req.Unschedule {
		if k := s.keys.Reminder(e.Shard, e.DueMs, e.ID); !seen[k] {
			seen[k] = true
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	return ops
}

// DueReminders reads, for each query, its shard's entries due from its
// FromMs through its ThroughMs, earliest first, at most its Limit: one etcd
// request for them all (a node's scan of its shards, every 200 ms, costs
// one round trip). It reads from the local etcd member (a stale read only
// fires an entry a moment late, or again under the same operation id). An
// entry that cannot be decoded is returned in its result's Bad: the caller
// removes it.
func (s *Store) DueReminders(ctx context.Context, qs []reminder.Query) ([]reminder.Result, error) {
	if len(qs) > reminder.Shards*2 {
		return nil, fmt.Errorf("%w: %d due-reminder queries", ErrInvalidRequest, len(qs))
	}
	ops := make([]clientv3.Op, len(qs))
	for i, q := range qs {
		if q.Shard < 0 || q.Shard >= reminder.Shards || q.ThroughMs <= 0 || q.Limit <= 0 || q.FromMs < 0 || q.FromMs > q.ThroughMs {
			return nil, fmt.Errorf("%w: due reminders of shard %d from %d through %d (limit %d)", ErrInvalidRequest, q.Shard, q.FromMs, q.ThroughMs, q.Limit)
		}
		prefix := s.keys.RemindersShard(q.Shard)
		from := prefix
		if q.FromMs > 0 {
			from = fmt.Sprintf("%s%013d", prefix, q.FromMs)
		}
		end := fmt.Sprintf("%s%013d0", prefix, q.ThroughMs) // past every key due at ThroughMs ("/" < "0")
		ops[i] = clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithLimit(int64(q.Limit)), clientv3.WithSerializable())
	}
	out := make([]reminder.Result, len(qs))
	if len(qs) == 0 {
		return out, nil
	}
	resp, err := s.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("authority: read due reminders: %w", err)
	}
	for i, q := range qs {
		prefix := s.keys.RemindersShard(q.Shard)
		for _, kv := range resp.Responses[i].GetResponseRange().GetKvs() {
			d := reminder.Due{Key: string(kv.Key), Rev: kv.ModRevision, Shard: q.Shard}
			ms, id, ok := strings.Cut(strings.TrimPrefix(d.Key, prefix), "/")
			dueMs, perr := strconv.ParseInt(ms, 10, 64)
			e, derr := reminder.DecodeEntry(kv.Value)
			switch {
			case !ok || len(ms) != 13 || perr != nil || dueMs <= 0 || !validReplyID(id),
				derr != nil || reminder.ID(e.Object, e.Name, e.Seq) != id || reminder.ShardOf(e.Object) != q.Shard:
				out[i].Bad = append(out[i].Bad, d)
			default:
				d.DueMs, d.Entry = dueMs, e
				out[i].Due = append(out[i].Due, d)
			}
		}
	}
	return out, nil
}

// AdvanceReminder replaces entry d by next (nil: removes it), if d is
// still as it was read. It reports whether it did.
func (s *Store) AdvanceReminder(ctx context.Context, d reminder.Due, next *reminder.Scheduled) (bool, error) {
	ops := []clientv3.Op{clientv3.OpDelete(d.Key)}
	if next != nil {
		ops = append(ops, clientv3.OpPut(s.keys.Reminder(next.Shard, next.DueMs, next.ID), string(next.Value)))
	}
	resp, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(d.Key), "=", d.Rev)).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("authority: advance reminder %s: %w", d.Key, err)
	}
	return resp.Succeeded, nil
}

// RebaseReminder records in entry d that its firing's operation id is made
// at atMs (reminder.Entry.AtMs), if d is still as it was read; it returns
// the entry as written.
func (s *Store) RebaseReminder(ctx context.Context, d reminder.Due, atMs int64) (reminder.Due, bool, error) {
	d.Entry.AtMs = atMs
	resp, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(d.Key), "=", d.Rev)).
		Then(clientv3.OpPut(d.Key, string(d.Entry.Encode()))).Commit()
	if err != nil {
		return d, false, fmt.Errorf("authority: re-base reminder %s: %w", d.Key, err)
	}
	if !resp.Succeeded {
		return d, false, nil
	}
	d.Rev = resp.Header.Revision
	return d, true, nil
}

// A state store beside etcd (pkg/statestore) cannot write the schedule in
// the transaction of the state: it puts the entries a change sets before
// the change (PutSchedule), and removes the ones it fired after it
// (DropSchedule). An entry left by a change that was not written fires a
// reminder the object no longer has (refused as not found, then removed)
// or a due time its persisted reply answers: extra entries are harmless,
// a missing one would lose a firing.

// PutSchedule writes req's Schedule, fenced as PersistState is by the
// record's store version and the owner's key (not by the state key, which
// is elsewhere). Outcome: Written, Moved, Superseded, OwnerGone; an RPC
// error is returned as is (the entries may or may not be there: harmless).
func (s *Store) PutSchedule(ctx context.Context, req PersistRequest) (PersistResult, error) {
	if err := req.Validate(); err != nil {
		return PersistResult{}, err
	}
	var ops []clientv3.Op
	for _, op := range s.scheduleOps(req) {
		if op.IsPut() {
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 {
		return PersistResult{Outcome: PersistWritten}, nil
	}
	authKey, ownerKey := s.keys.Authority(req.Object), s.keys.Owner(req.Fence.Owner.ID)
	resp, err := s.c.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(authKey), "=", req.StoreVersion),
		clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", req.Fence.Owner.Generation),
	).Then(ops...).Else(clientv3.OpGet(authKey), clientv3.OpGet(ownerKey, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return PersistResult{}, fmt.Errorf("authority: schedule reminders of %s: %w", req.Object, err)
	}
	res := PersistResult{Outcome: PersistWritten, Revision: resp.Header.Revision}
	if resp.Succeeded {
		return res, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if res.Current, err = s.snapshot(kvs[0], resp.Header.Revision); err != nil {
			return PersistResult{}, err
		}
		res.Found = true
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	switch {
	case !res.Found || res.Current.Fence() != req.Fence:
		res.Outcome = PersistSuperseded
	case len(kvs) == 0 || kvs[0].CreateRevision != req.Fence.Owner.Generation:
		res.Outcome = PersistOwnerGone
	default:
		res.Outcome = PersistMoved
	}
	return res, nil
}

// DropSchedule removes req's Unschedule entries that its Schedule does not
// put again, after the change that fired them was written. Not fenced: the
// change is persisted, so no owner after it schedules those due times.
func (s *Store) DropSchedule(ctx context.Context, req PersistRequest) error {
	var ops []clientv3.Op
	for _, op := range s.scheduleOps(req) {
		if op.IsDelete() {
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := s.c.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("authority: remove fired reminders of %s: %w", req.Object, err)
	}
	return nil
}
