package verify

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// RelocateFunc asks the owner of object to relocate it to target ("": the
// source chooses) and returns the relocation's status when it ended. Errors
// are gRPC statuses as the AdminService gives them (FailedPrecondition: not
// hosted there, Aborted: already relocating, Unavailable: no target or not
// reachable).
type RelocateFunc func(ctx context.Context, object, target string) (*pb.RelocationStatus, error)

// RelocateManyFunc asks one owner to move objects it hosts to target as
// bulk moves (AdminService.RelocateMany) and returns the outcome of each
// object it sent, in order (one the owner did not host is refused). The
// cluster picks the owner (the one that hosts most of them).
type RelocateManyFunc func(ctx context.Context, objects []string, target string) ([]*pb.BulkOutcome, error)

// Relocation modes of the storm.
const (
	ModeAny        = "any"        // the source chooses
	ModeNamed      = "named"      // a random node named
	ModeBack       = "back"       // to where the object last came from
	ModeSameTwice  = "same-twice" // one target twice in a row (the second finds it there)
	ModeConcurrent = "concurrent" // two relocations of one object at once
	ModeBulk       = "bulk"       // a bulk move of several objects to one target
)

// bulkObjects is how many objects a bulk attempt of the storm names.
const bulkObjects = 8

// Relocator moves random objects continuously while the workloads run.
type Relocator struct {
	Objects []string
	// ObjectsFunc, when set, gives the objects instead (the workloads'
	// objects change when they rotate).
	ObjectsFunc func() []string
	// Groups it relocates too (group/<id>): each moves with every member
	// (whose relocation alone a node refuses, so members are not among the
	// objects). Picks are uniform over the objects and the groups together.
	Groups []string
	// Targets are the node ids it may name.
	Targets  []string
	Relocate RelocateFunc
	// RelocateMany, when set, makes one attempt in six a bulk move of up
	// to 8 objects to a named node.
	RelocateMany RelocateManyFunc
	// Workers relocating at once (default 2); each waits Interval between
	// two relocations (default 100 ms).
	Workers  int
	Interval time.Duration
	// Timeout of one request (default 20 s).
	Timeout time.Duration

	mu   sync.Mutex
	from map[string]string // object → the node it last left
}

// Run relocates until ctx ends; every attempt is recorded in h.
func (r *Relocator) Run(ctx context.Context, h *History) {
	if (len(r.Objects) == 0 && r.ObjectsFunc == nil && len(r.Groups) == 0) || r.Relocate == nil {
		return
	}
	r.mu.Lock()
	r.from = map[string]string{}
	r.mu.Unlock()
	workers := r.Workers
	if workers <= 0 {
		workers = 2
	}
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i)+7, uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				r.once(ctx, rng, h)
				pause(ctx, max(r.Interval, time.Millisecond))
			}
		})
	}
	wg.Wait()
}

func (r *Relocator) once(ctx context.Context, rng *rand.Rand, h *History) {
	objs := r.Objects
	if r.ObjectsFunc != nil {
		objs = r.ObjectsFunc()
	}
	if len(objs)+len(r.Groups) == 0 {
		return
	}
	obj := r.pickObject(rng, objs)
	named := func() string {
		if len(r.Targets) == 0 {
			return ""
		}
		return pick(rng, r.Targets)
	}
	if r.RelocateMany != nil && len(r.Targets) > 0 && rng.IntN(6) == 0 {
		r.bulk(ctx, h, rng, objs, named())
		return
	}
	switch x := rng.IntN(20); {
	case x < 8:
		r.attempt(ctx, h, obj, "", ModeAny)
	case x < 13:
		r.attempt(ctx, h, obj, named(), ModeNamed)
	case x < 16:
		r.mu.Lock()
		back := r.from[obj]
		r.mu.Unlock()
		r.attempt(ctx, h, obj, back, ModeBack)
	case x < 18:
		t := named()
		r.attempt(ctx, h, obj, t, ModeSameTwice)
		r.attempt(ctx, h, obj, t, ModeSameTwice)
	default:
		var wg sync.WaitGroup
		wg.Go(func() { r.attempt(ctx, h, obj, "", ModeConcurrent) })
		wg.Go(func() { r.attempt(ctx, h, obj, named(), ModeConcurrent) })
		wg.Wait()
	}
}

func (r *Relocator) attempt(ctx context.Context, h *History, obj, target, mode string) {
	if ctx.Err() != nil {
		return
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 20 * time.Second
	}
	// The request is not cancelled when the storm stops: a relocation in
	// flight runs to its end.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	rec := Relocation{Object: obj, Target: target, Mode: mode, Call: h.Now()}
	st, err := r.Relocate(rctx, obj, target)
	rec.Return = h.Now()
	if err != nil {
		rec.Result, rec.Err = relocationErrClass(err), err.Error()
	} else {
		rec.Result = st.GetOutcome()
		if rec.Result == "" {
			rec.Result = "unknown"
		}
		if id, perr := wire.ParseRelocationIDBytes(st.GetRelocationId()); perr == nil {
			rec.RelocationID = id.String()
		}
		rec.Source, rec.To, rec.Err = st.GetSource(), st.GetTarget(), st.GetMessage()
		if rec.Result == "completed" {
			src, _, _ := strings.Cut(st.GetSource(), "@")
			r.mu.Lock()
			r.from[obj] = src
			r.mu.Unlock()
		}
	}
	h.AddRelocation(rec)
}

// bulk asks for a bulk move of up to bulkObjects of objs (groups move
// alone) to target and records each object's outcome.
func (r *Relocator) bulk(ctx context.Context, h *History, rng *rand.Rand, objs []string, target string) {
	if ctx.Err() != nil || len(objs) == 0 {
		return
	}
	var pick []string
	for range bulkObjects {
		o := objs[rng.IntN(len(objs))]
		if !slices.Contains(pick, o) {
			pick = append(pick, o)
		}
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 20 * time.Second
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	call := h.Now()
	outs, err := r.RelocateMany(rctx, pick, target)
	ret := h.Now()
	if err != nil {
		for _, o := range pick {
			h.AddRelocation(Relocation{Object: o, Target: target, Mode: ModeBulk, Call: call, Return: ret, Result: relocationErrClass(err), Err: err.Error()})
		}
		return
	}
	for _, o := range outs {
		rec := Relocation{Object: o.GetObject(), Target: target, Mode: ModeBulk, Call: call, Return: ret, Result: o.GetOutcome(), Err: o.GetMessage()}
		if rec.Result == "refused" {
			rec.Result = "not-hosted"
		}
		if id, perr := wire.ParseRelocationIDBytes(o.GetRelocationId()); perr == nil {
			rec.RelocationID = id.String()
		}
		h.AddRelocation(rec)
	}
}

// relocationErrClass names a refused or unanswered relocation request.
func relocationErrClass(err error) string {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "unknown"
	}
	s, ok := status.FromError(err)
	if !ok {
		return "error"
	}
	switch s.Code() {
	case codes.FailedPrecondition:
		return "not-hosted"
	case codes.Aborted:
		return "busy"
	case codes.Unavailable:
		if strings.Contains(s.Message(), "no relocation target") {
			return "no-target"
		}
		return "unavailable"
	case codes.DeadlineExceeded, codes.Canceled:
		return "unknown"
	case codes.Unimplemented:
		return "unimplemented"
	case codes.InvalidArgument:
		return "invalid"
	}
	return "error"
}

// pickObject picks uniformly among objs and the groups.
func (r *Relocator) pickObject(rng *rand.Rand, objs []string) string {
	if k := rng.IntN(len(objs) + len(r.Groups)); k >= len(objs) {
		return r.Groups[k-len(objs)]
	}
	return pick(rng, objs)
}
