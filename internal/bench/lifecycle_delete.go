package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/meshloc/meshloc/internal/bench/baseline"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// lifecycleDeletesCAS is the baseline of the deletes' rate.
const lifecycleDeletesCAS = "lifecycle: etcd CAS/s, 64 clients, the same etcd"

// lifecycleDeletes deletes count of the sleeping dcounters made by the
// lifecycle section (names prefix0…), 64 in flight, each as DELETE
// /v1/objects runs it (a serializable read of the record, then the
// delete transaction compared on its store version: record, state and
// replies removed, the catalog marked; concurrent deletes share etcd
// round trips, as locationd's batched store does), beside etcd's CAS/s with 64
// clients on the same etcd (the bound: 0.5×).
func (x *run) lifecycleDeletes(ctx context.Context, m *mesh, prefix string, count int) error {
	x.step("lifecycle: etcd CAS/s with 64 clients, %s", x.cfg.Plan.Window)
	ok, el, err := baseline.CASRate(ctx, m.ec, "/bench/lifecycle-cas", 64, x.cfg.Plan.Window)
	if err != nil {
		return err
	}
	x.base(Measure{Name: lifecycleDeletesCAS, Value: float64(ok) / el.Seconds(), Unit: "/s", N: ok})
	x.step("lifecycle: deleting %d sleeping dcounters, 64 in flight", count)
	st := authority.New(m.ec, keyspace.Default()).Batched(authority.Limits{}) // as locationd's
	t0 := time.Now()
	err = inParallel(count, 64, func(i int) error { return deleteOne(ctx, st, keyspace.Actor("dcounter", prefix+strconv.Itoa(i))) })
	took := time.Since(t0)
	if err != nil {
		return err
	}
	x.fig(Measure{Name: "lifecycle: deletes/s of sleeping objects, 64 in flight", Value: float64(count) / took.Seconds(), Unit: "/s", N: int64(count),
		Note: "each a local read of the record and the delete transaction (batched), as DELETE /v1/objects/{object} runs them"}, lifecycleDeletesCAS, ge(0.5))
	return nil
}

// deleteOne deletes obj as locationd does (authority.Store.DeleteObject).
func deleteOne(ctx context.Context, st *authority.Store, obj keyspace.Object) error {
	if _, _, err := st.DeleteObject(ctx, obj); err != nil {
		return fmt.Errorf("bench: lifecycle: delete %s: %w", obj, err)
	}
	return nil
}
