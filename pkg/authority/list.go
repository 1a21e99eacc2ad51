package authority

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Listing records: every one at one revision (List), or a page of them
// (ListPage), which an operator's tools read one after another at the
// revision of the first, so that a listing of a million objects is never
// one answer and never a mix of revisions.

// ListOptions filters List and ListPage.
type ListOptions struct {
	// Kind keeps only objects of this kind ("actor" or "group"); empty: all.
	Kind string
	// Owner keeps only objects owned by this owner id; empty: all.
	Owner string
	// Contains keeps only objects whose name contains it; empty: all.
	Contains string
	// After starts the listing after this object (in name order); zero:
	// at the start. ListPage only.
	After keyspace.Object
	// Limit bounds the objects of a page (0: no bound). ListPage only.
	Limit int
	// Revision reads at this etcd revision (0: the current one): the
	// revision of a listing's first page, for the next ones. ListPage only.
	Revision int64
}

// Page is one page of a listing.
type Page struct {
	Snapshots []Snapshot
	// Revision is the one revision the page was read at.
	Revision int64
	// Next, when not zero, is where the listing goes on (the After of the
	// next page): the limit was reached, or MaxListScan records were read,
	// before the end of the keys.
	Next keyspace.Object
}

// MaxListScan bounds the records one ListPage reads from etcd: a page whose
// filters match few objects ends there, with Next, rather than reading the
// whole keyspace in one request.
const MaxListScan = 100_000

// listScanMax is MaxListScan (a test lowers it).
var listScanMax = MaxListScan

// listBatch is how many keys one etcd read of a listing asks for.
const listBatch = 1000

// ErrListCompacted: the revision of a listing's page was compacted away;
// start the listing again.
var ErrListCompacted = wire.Sentinel(pb.Code_CODE_CONFLICT, "authority: the listing's revision was compacted: list again from the start")

// List reads every record at one revision (paged by 1,000 keys at that
// revision); only Kind, Owner and Contains of opt apply.
func (s *Store) List(ctx context.Context, opt ListOptions) ([]Snapshot, int64, error) {
	opt.After, opt.Limit, opt.Revision = keyspace.Object{}, 0, 0
	p, err := s.listPage(ctx, opt, 0)
	return p.Snapshots, p.Revision, err
}

// ListPage reads one page of records at one revision: those after
// opt.After that pass the filters, at most opt.Limit of them, reading at
// most MaxListScan records. A Revision etcd has compacted is
// ErrListCompacted.
func (s *Store) ListPage(ctx context.Context, opt ListOptions) (Page, error) {
	if opt.Limit < 0 || opt.Revision < 0 {
		return Page{}, fmt.Errorf("%w: limit %d, revision %d", ErrInvalidRequest, opt.Limit, opt.Revision)
	}
	return s.listPage(ctx, opt, listScanMax)
}

func (s *Store) listPage(ctx context.Context, opt ListOptions, maxScan int) (Page, error) {
	prefix := s.keys.AuthorityPrefix()
	if opt.Kind != "" {
		if opt.Kind != keyspace.KindActor && opt.Kind != keyspace.KindGroup {
			return Page{}, fmt.Errorf("%w: kind %q (want actor or group)", ErrInvalidRequest, opt.Kind)
		}
		prefix += opt.Kind + "/"
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	if !opt.After.IsZero() {
		if k := s.keys.Authority(opt.After) + "\x00"; k > key {
			key = k
		}
	}
	p := Page{Revision: opt.Revision}
	scanned := 0
	for key < end {
		n := listBatch
		if maxScan > 0 {
			n = max(1, min(n, maxScan-scanned))
		}
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(n))}
		if p.Revision != 0 {
			opts = append(opts, clientv3.WithRev(p.Revision))
		}
		resp, err := s.c.Get(ctx, key, opts...)
		if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrFutureRev) {
			return Page{}, fmt.Errorf("%w (revision %d): %w", ErrListCompacted, p.Revision, err)
		}
		if err != nil {
			return Page{}, fmt.Errorf("authority: list: %w", err)
		}
		if p.Revision == 0 {
			p.Revision = resp.Header.Revision
		}
		for i, kv := range resp.Kvs {
			scanned++
			snap, err := s.snapshot(kv, p.Revision)
			if err != nil {
				continue // not ours to judge here; Read reports it
			}
			if (opt.Owner != "" && snap.Record.Owner.ID != opt.Owner) || (opt.Contains != "" && !strings.Contains(snap.Object.String(), opt.Contains)) {
				continue
			}
			p.Snapshots = append(p.Snapshots, snap)
			if opt.Limit > 0 && len(p.Snapshots) == opt.Limit && (i < len(resp.Kvs)-1 || resp.More) {
				p.Next = snap.Object
				return p, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return p, nil
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if maxScan > 0 && scanned >= maxScan {
			// Where the scan stopped: a key that does not parse cannot be
			// a cursor, so the page ends at the last object that did.
			if obj, err := s.keys.ParseAuthority(last); err == nil {
				p.Next = obj
				return p, nil
			}
		}
		key = last + "\x00"
	}
	return p, nil
}
