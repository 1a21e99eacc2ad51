package etcdscan_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/etcdscan"
	"github.com/meshloc/meshloc/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noStream is an etcd that does not implement RangeStream (before 3.7,
// or etcd's gRPC proxy).
type noStream struct{ clientv3.KV }

func (noStream) GetStream(context.Context, string, ...clientv3.OpOption) (clientv3.GetStreamChan, error) {
	return nil, status.Error(codes.Unimplemented, "RangeStream is not supported")
}

// TestRange reads every key of a range at one revision, in order, by the
// stream and by the fallback's pages, and ignores a later write.
func TestRange(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	ctx := context.Background()
	const n = 2*etcdscan.PageSize + 17
	for start := 0; start < n; start += 100 {
		var ops []clientv3.Op
		for i := start; i < min(start+100, n); i++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("p/%06d", i), fmt.Sprintf("v%d", i)))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	outside, err := c.Put(ctx, "q/0", "outside")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		kv   clientv3.KV
	}{{"stream", c}, {"pages", noStream{c}}} {
		t.Run(tc.name, func(t *testing.T) {
			first, err := c.Get(ctx, "p/000000")
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			rev, err := etcdscan.Range(ctx, tc.kv, "p/", "p0", 0, func(kvs []*mvccpb.KeyValue) error {
				for _, kv := range kvs {
					if want := fmt.Sprintf("p/%06d", seen); string(kv.Key) != want {
						return fmt.Errorf("key %q, want %q", kv.Key, want)
					}
					want := fmt.Sprintf("v%d", seen)
					if seen == 0 {
						want = string(first.Kvs[0].Value)
					}
					if string(kv.Value) != want {
						return fmt.Errorf("%s = %q, want %q (the scan's revision)", kv.Key, kv.Value, want)
					}
					seen++
				}
				if seen == 1 || (seen > etcdscan.PageSize && seen < etcdscan.PageSize+200) {
					_, err := c.Put(ctx, "p/000000", "later "+tc.name) // after the scan's revision
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if seen != n {
				t.Fatalf("saw %d keys, want %d", seen, n)
			}
			if rev < outside.Header.Revision {
				t.Fatalf("revision %d, before the last write before the scan (%d)", rev, outside.Header.Revision)
			}
		})
	}
}

// TestRangeStops: fn's error ends the scan, by both paths, and nothing
// is left running.
func TestRangeStops(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	ctx := context.Background()
	for i := range 50 {
		if _, err := c.Put(ctx, fmt.Sprintf("p/%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	stop := errors.New("enough")
	for _, kv := range []clientv3.KV{c, noStream{c}} {
		if _, err := etcdscan.Range(ctx, kv, "p/", "p0", 0, func([]*mvccpb.KeyValue) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("err %v, want %v", err, stop)
		}
	}
}
