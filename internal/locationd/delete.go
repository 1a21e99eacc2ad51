package locationd

import (
	"context"
	"fmt"
	"net/http"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// objectRoute serves /v1/objects/{object}: GET (HEAD) reads it
// (http_reads.go), DELETE deletes it (an operator's action: the operate
// role when the API serves TLS; authorize).
func (h *handlers) objectRoute(mux *http.ServeMux) {
	const route = "/v1/objects/{object...}"
	s := h.s
	read, del := s.serve(route, h.object, s.cfg.RequestTimeout), s.serve(route, h.deleteObject, s.cfg.RequestTimeout)
	mux.Handle(route, s.m.instrument(route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			read(w, r)
		case http.MethodDelete:
			del(w, r)
		default:
			w.Header().Set("Allow", "GET, HEAD, DELETE")
			s.writeError(w, r, route, fmt.Errorf("%w: %s %s (GET or DELETE only)", errMethodNotAllowed, r.Method, r.URL.Path))
		}
	})))
}

// deleteObject deletes one object (authority.Store.DeleteObject): its
// record, state and replies in one transaction fenced by the record's
// store version, through the batched store. Its owner, if any, sees the
// record gone and drops the instance. A group, a group's member and a
// relocating object are refused (409 conflict), an unknown object is 404
// not_found; nothing changes then.
func (h *handlers) deleteObject(ctx context.Context, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	obj, err := keyspace.ParseObject(r.PathValue("object"))
	if err != nil {
		return nil, err
	}
	snap, res, err := h.del.DeleteObject(ctx, obj)
	if err != nil {
		return nil, err
	}
	h.s.m.deletes.Inc()
	out := api.Deleted{Object: obj.String(), ObjectGeneration: snap.Record.ObjectGeneration, Revision: res.Revision}
	if !snap.Record.Owner.IsZero() {
		out.Owner = snap.Record.Owner.String()
	}
	return out, nil
}
