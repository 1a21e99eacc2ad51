package authority

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/tracing"
)

// tracedTxn is a transaction of a traced relocation, activation or delete:
// its commit is a span of its own, "etcd.txn", a child of the span of the
// work that made it, named by what it writes (intent, commit, preserve,
// activate, sleep, wake, delete, group), with whether it succeeded and the
// revision it made.
type tracedTxn struct {
	clientv3.Txn
	ctx     context.Context
	what    string
	batched bool
	cmps    int
	ops     int
}

func (t *tracedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps += len(cs)
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *tracedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.ops += len(ops)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *tracedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *tracedTxn) Commit() (*clientv3.TxnResponse, error) {
	_, span := tracing.Start(t.ctx, "etcd.txn "+t.what, trace.SpanKindClient,
		attribute.String("db.system.name", "etcd"), attribute.String("meshloc.txn", t.what),
		attribute.Int("meshloc.compares", t.cmps), attribute.Int("meshloc.ops", t.ops), attribute.Bool("meshloc.batched", t.batched))
	defer span.End()
	resp, err := t.Txn.Commit()
	if err != nil {
		tracing.Fail(span, err.Error())
		return resp, err
	}
	span.SetAttributes(attribute.Bool("meshloc.succeeded", resp.Succeeded), attribute.Int64("meshloc.revision", resp.Header.GetRevision()))
	return resp, nil
}

// traceMany starts, when ctx is traced, the span of the n transactions of
// one doMany (of what), "etcd.txns <what>": they go in shared requests, so
// a span each would only repeat the batch's timing. The function it
// returns ends it with how many succeeded, how many failed and the last
// revision.
func traceMany(ctx context.Context, what string, n int) func([]batchResult) {
	if !tracing.Recording(ctx) || n == 0 {
		return func([]batchResult) {}
	}
	_, span := tracing.Start(ctx, "etcd.txns "+what, trace.SpanKindClient,
		attribute.String("db.system.name", "etcd"), attribute.String("meshloc.txn", what), attribute.Int("meshloc.txns", n))
	return func(rs []batchResult) {
		ok, failed, rev := 0, 0, int64(0)
		for _, r := range rs {
			switch {
			case r.err != nil:
				failed++
			case r.resp.Succeeded:
				ok++
			}
			if r.resp != nil {
				rev = max(rev, r.resp.Header.GetRevision())
			}
		}
		span.SetAttributes(attribute.Int("meshloc.succeeded", ok), attribute.Int("meshloc.errors", failed), attribute.Int64("meshloc.revision", rev))
		if failed > 0 {
			tracing.Fail(span, fmt.Sprintf("%d of %d transactions failed", failed, len(rs)))
		}
		span.End()
	}
}
