// Package etcdscan reads a whole key range of etcd at one revision, chunk by
// chunk, in time linear in the range.
//
// A paged Get (WithLimit) is not linear: etcd counts every key left in the
// range to answer each page (the response's Count), so listing N keys in
// pages of P visits about N²/2P keys — a million records in pages of 5,000
// cost 14 s of etcd's CPU, most of a joining node's start. etcd 3.7's
// RangeStream sends the range in chunks sized to its request limit and
// counts nothing, so Scan uses it; against an etcd (or a proxy) that does
// not implement it, Scan falls back to pages pinned to one revision.
package etcdscan

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// PageSize is the fallback's page.
const PageSize = 5000

// Range calls fn with every key-value in [key, end), in key order, at one
// revision (rev, or the current one when rev is 0), chunk by chunk; it
// answers that revision. fn's error ends the scan and is returned.
func Range(ctx context.Context, kv clientv3.KV, key, end string, rev int64, fn func([]*mvccpb.KeyValue) error) (int64, error) {
	got, err := stream(ctx, kv, key, end, rev, fn)
	if status.Code(err) != codes.Unimplemented {
		return got, err
	}
	return pages(ctx, kv, key, end, rev, fn)
}

// stream is Range over etcd's RangeStream. Unimplemented comes before any
// chunk (the server refuses the call), so the fallback never repeats one.
func stream(ctx context.Context, kv clientv3.KV, key, end string, rev int64, fn func([]*mvccpb.KeyValue) error) (int64, error) {
	sctx, cancel := context.WithCancel(ctx)
	opts := []clientv3.OpOption{clientv3.WithRange(end)}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	ch, err := kv.GetStream(sctx, key, opts...)
	if err != nil {
		cancel()
		return 0, err
	}
	// The client's receiving goroutine ends when the stream does; cancel
	// and drain so that it never blocks on a chunk no one reads.
	defer func() {
		cancel()
		for range ch {
		}
	}()
	for r := range ch {
		if err := r.Err(); err != nil {
			return 0, err
		}
		if err := fn(r.Kvs); err != nil {
			return 0, err
		}
		if r.Header != nil {
			if r.More {
				return 0, fmt.Errorf("etcdscan: the stream of [%q, %q) ended with more keys", key, end)
			}
			return r.Header.Revision, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("etcdscan: the stream of [%q, %q) ended without its last chunk", key, end)
}

// pages is Range over paged Gets, pinned to the first page's revision.
func pages(ctx context.Context, kv clientv3.KV, key, end string, rev int64, fn func([]*mvccpb.KeyValue) error) (int64, error) {
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(PageSize)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(ctx, key, opts...)
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if err := fn(resp.Kvs); err != nil {
			return 0, err
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
