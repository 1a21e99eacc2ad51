package authority_test

import (
	"context"
	"errors"
	"testing"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// While etcd's NOSPACE alarm is on, an intent and an activation fail with
// ErrNoSpace (resource_exhausted), not as a lost race or an uncertainty; a
// preserve and a recovery say NoSpace; every one of them wrote nothing.
// Once the alarm is disarmed, the same writes go through. Batched writes
// (a node's) say the same.
func TestNoSpace(t *testing.T) {
	for _, batched := range []bool{false, true} {
		name := map[bool]string{false: "alone", true: "batched"}[batched]
		t.Run(name, func(t *testing.T) {
			c, s := setup(t)
			if batched {
				s = s.Batched(authority.Limits{})
			}
			ctx := context.Background()
			src, lid := owner(t, c, "src", 30)
			dst, _ := owner(t, c, "dst", 30)
			obj := keyspace.Actor("counter", "c")
			seen := activate(t, s, obj, src)
			intent := authority.IntentRequest{Seen: seen, Source: src, LeaseID: lid,
				Intent: authority.Intent{RelocationID: "r1", Target: dst, TargetNode: node("dst"), DeadlineMs: 1, NonceHash: "00"}}

			etcdtest.RaiseNoSpace(t, c)
			w, err := s.Intend(ctx, intent)
			if !errors.Is(err, authority.ErrNoSpace) || !authority.IsNoSpace(err) || wire.CodeOf(err) != pb.Code_CODE_RESOURCE_EXHAUSTED || w.Written || !w.NoSpace {
				t.Fatalf("intent under NOSPACE: %+v, %v; want ErrNoSpace, resource_exhausted, not written", w, err)
			}
			_, err = s.Activate(ctx, authority.ActivateRequest{Object: keyspace.Actor("counter", "new"), Owner: src, Node: node("src")})
			if !errors.Is(err, authority.ErrNoSpace) {
				t.Fatalf("activation under NOSPACE: %v, want ErrNoSpace", err)
			}
			p, err := s.Preserve(ctx, authority.PreserveRequest{Seen: seen, Source: src, RelocationID: "r1"})
			if err != nil || p.Written || !p.NoSpace {
				t.Fatalf("preserve under NOSPACE: %+v %v, want NoSpace and not written", p, err)
			}
			if got, err := s.Read(ctx, obj); err != nil || got.StoreVersion != seen.StoreVersion {
				t.Fatalf("the record after the refused writes: %+v %v, want it unchanged", got, err)
			}

			etcdtest.DisarmNoSpace(t, c)
			if w, err := s.Intend(ctx, intent); err != nil || !w.Written || w.NoSpace {
				t.Fatalf("intent after the alarm was disarmed: %+v %v", w, err)
			}
			activate(t, s, keyspace.Actor("counter", "new"), src)
		})
	}
}

// IsNoSpace knows etcd's error in its forms, and nothing else.
func TestIsNoSpace(t *testing.T) {
	if authority.IsNoSpace(nil) || authority.IsNoSpace(errors.New("etcdserver: request timed out")) || authority.IsNoSpace(authority.ErrUncertain) {
		t.Error("IsNoSpace of another error")
	}
}
