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
// is due with one range from the shard's start (DueReminders), fires each
// entry as a request to its object, and then replaces the entry by its
// next due time, or removes it (AdvanceReminder): one transaction that
// compares the entry's ModRevision, so of two nodes that fired the same
// entry (a primary and its backup) one advances it.

// DueReminders reads shard's entries due at or before throughMs, earliest
// first, at most limit. It reads from the local etcd member (a stale read
// only fires an entry a moment late, or again under the same operation
// id). An entry that cannot be decoded is returned with a zero Entry and
// its error in bad: the caller removes it.
func (s *Store) DueReminders(ctx context.Context, shard int, throughMs int64, limit int) (due []reminder.Due, bad []reminder.Due, err error) {
	if shard < 0 || shard >= reminder.Shards || throughMs <= 0 || limit <= 0 {
		return nil, nil, fmt.Errorf("%w: due reminders of shard %d through %d (limit %d)", ErrInvalidRequest, shard, throughMs, limit)
	}
	prefix := s.keys.RemindersShard(shard)
	end := fmt.Sprintf("%s%013d0", prefix, throughMs) // past every key due at throughMs ("/" < "0")
	resp, err := s.c.Get(ctx, prefix, clientv3.WithRange(end), clientv3.WithLimit(int64(limit)), clientv3.WithSerializable())
	if err != nil {
		return nil, nil, fmt.Errorf("authority: read due reminders of shard %d: %w", shard, err)
	}
	for _, kv := range resp.Kvs {
		d := reminder.Due{Key: string(kv.Key), Rev: kv.ModRevision, Shard: shard}
		rest := strings.TrimPrefix(d.Key, prefix)
		ms, id, ok := strings.Cut(rest, "/")
		dueMs, perr := strconv.ParseInt(ms, 10, 64)
		e, derr := reminder.DecodeEntry(kv.Value)
		switch {
		case !ok || len(ms) != 13 || perr != nil || dueMs <= 0 || !validReplyID(id):
			bad = append(bad, d)
		case derr != nil || reminder.ID(e.Object, e.Name, e.Seq) != id || reminder.ShardOf(e.Object) != shard:
			bad = append(bad, d)
		default:
			d.DueMs, d.Entry = dueMs, e
			due = append(due, d)
		}
	}
	return due, bad, nil
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
