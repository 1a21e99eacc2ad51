package hosted

import (
	"sync"

	"github.com/meshloc/meshloc/pkg/wire"
)

// Routes are a node's requests that run elsewhere (captured or
// sent as DATA): their callers wait here for a relayed reply.
type Routes struct {
	mu    sync.Mutex
	next  uint64
	byID  map[uint64]*Work
	ended map[uint64]wire.OperationID // recently answered (their requests), for alreadyTerminal
	order []uint64
}

// NewRoutes is an empty table.
func NewRoutes() *Routes {
	return &Routes{byID: map[uint64]*Work{}, ended: map[uint64]wire.OperationID{}}
}

// Add registers w, its caller waiting here, and returns its route.
func (p *Routes) Add(w *Work) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.Route == 0 {
		p.next++
		w.Route = p.next
	}
	p.byID[w.Route] = w
	return w.Route
}

// Take removes and returns the pending work of route, whoever's it is
// (the node's own bookkeeping: a request that ended otherwise).
func (p *Routes) Take(route uint64) *Work {
	w, _ := p.takeIf(route, func(*Work) bool { return true })
	return w
}

// Claim removes and returns the pending work of route if it is exactly
// the request op and may lets its caller answer it; terminal reports that
// route answered request op before. Anything else — no such route,
// another request's, not the caller's to answer — is the same nil,
// false: a prober learns nothing of the routes pending.
func (p *Routes) Claim(route uint64, op []byte, may func(*Work) bool) (w *Work, terminal bool) {
	w, e := p.takeIf(route, func(w *Work) bool { return string(w.Op[:]) == string(op) && may(w) })
	return w, w == nil && e != nil && string(e[:]) == string(op)
}

// takeIf removes and returns the pending work of route if ok accepts it;
// otherwise it returns the request route answered, if it was.
func (p *Routes) takeIf(route uint64, ok func(*Work) bool) (*Work, *wire.OperationID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, found := p.byID[route]; found && ok(w) {
		delete(p.byID, route)
		p.ended[route] = w.Op
		p.order = append(p.order, route)
		if len(p.order) > 65536 {
			delete(p.ended, p.order[0])
			p.order = p.order[1:]
		}
		return w, nil
	}
	if e, found := p.ended[route]; found {
		return nil, &e
	}
	return nil, nil
}
