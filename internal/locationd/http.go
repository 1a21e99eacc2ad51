package locationd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Errors of the API layer itself (the store's come from pkg/authority).
var (
	// errInvalidArgument: a query parameter or path is malformed; nothing was read.
	errInvalidArgument = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "locationd: invalid argument")
	// errRouteNotFound: no route has this path.
	errRouteNotFound = wire.Sentinel(pb.Code_CODE_NOT_FOUND, "locationd: no such route")
	// errMethodNotAllowed: the route exists, for GET only.
	errMethodNotAllowed = &api.Error{Code: api.CodeMethodNotAllowed, Message: "locationd: method not allowed"}
	// errUnsupportedMediaType: a POST body that is not application/json.
	errUnsupportedMediaType = &api.Error{Code: api.CodeUnsupportedMediaType, Message: "locationd: unsupported media type"}
	// errCrossOrigin: a browser sent a change from a page of another origin.
	errCrossOrigin = wire.Sentinel(pb.Code_CODE_PERMISSION_DENIED, "locationd: cross-origin request refused")
	// errUnavailable: etcd did not answer, or the answer kept changing under us.
	errUnavailable = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "locationd: store unavailable")
)

// toAPIError is err as the API answers it: its code (wire.CodeOf, the one
// table of the system), the HTTP status and API code of that
// (wire.HTTPStatus), its message. The HTTP layer's own refusals (405, 415)
// are *api.Error already.
func toAPIError(err error) *api.Error {
	if e, ok := api.AsError(err); ok {
		return &api.Error{Code: e.Code, Message: err.Error(), Status: api.StatusOf(e.Code)}
	}
	c := wire.CodeOf(err)
	status := wire.HTTPStatus(c)
	if name := wire.CodeName(c); api.Known(name) {
		return &api.Error{Code: name, Message: err.Error(), Status: status} // a code the API has too (corrupt_record)
	}
	return &api.Error{Code: api.CodeOfStatus(status), Message: err.Error(), Status: status}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiHandler is a route's logic: it returns the answer, or an error that
// toAPIError turns into a typed JSON error.
type apiHandler func(ctx context.Context, r *http.Request) (any, error)

type handlers struct {
	s      *Server
	st     *authority.Store
	del    *authority.Store // st, batched: concurrent deletes share etcd round trips (delete.go)
	cli    *clientv3.Client
	pool   *adminPool
	moves  *prometheus.CounterVec // meshloc_rebalance_moves_total (rebalance.go)
	events *eventHub              // GET /v1/events (events*.go)
}

// serve answers a request with f. timeout > 0 bounds f's ctx; 0 leaves the
// bound to f (a long-running route: see holdAnswer).
func (s *Server) serve(pattern string, f apiHandler, timeout time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		hold := &answerHold{s: s, rc: http.NewResponseController(w)}
		v, err := f(context.WithValue(ctx, answerHoldKey{}, hold), r)
		hold.ready()
		if err != nil {
			s.writeError(w, r, pattern, err)
			return
		}
		if a, ok := v.(accepted); ok {
			writeJSON(w, http.StatusAccepted, a.v)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// accepted is an answer for an operation that goes on after it: 202.
type accepted struct{ v any }

// answerHold lifts the write deadline of one request's connection
// (Config.HTTPWriteTimeout, counted from the request read) for a route that
// answers only when a long operation ended.
type answerHold struct {
	s    *Server
	rc   *http.ResponseController
	held bool
}

type answerHoldKey struct{}

// holdAnswer lets the request of ctx (one served by serve) answer up to d
// from now, plus HTTPWriteTimeout to write the answer. Call it before the
// current bound passes: a passed write deadline cannot be extended.
func (s *Server) holdAnswer(ctx context.Context, d time.Duration) {
	h, _ := ctx.Value(answerHoldKey{}).(*answerHold)
	if h == nil {
		return
	}
	h.held = true
	h.s.setWriteDeadline(h.rc, d+h.s.cfg.HTTPWriteTimeout)
}

// ready bounds the answer, now that it is known, to HTTPWriteTimeout again
// (a client that does not read it does not hold the connection until the
// operation's bound).
func (h *answerHold) ready() {
	if h.held {
		h.s.setWriteDeadline(h.rc, h.s.cfg.HTTPWriteTimeout)
	}
}

// setWriteDeadline sets the write deadline of rc's connection to now+d.
func (s *Server) setWriteDeadline(rc *http.ResponseController, d time.Duration) {
	if err := rc.SetWriteDeadline(time.Now().Add(d)); err != nil {
		s.log.Warn().Err(err).Msg("cannot set the write deadline of an answer")
	}
}

// readBody checks a POST's media type and reads its body into memory, at
// most maxRequestBody bytes, within Config.HTTPReadTimeout (the server's: a
// client that stalls in its body gets an error and its connection closed).
// A non-empty body must be application/json (any charset parameter utf-8),
// else errUnsupportedMediaType; an empty body may come without a
// Content-Type. On success r.Body is the body read, and the write deadline
// is HTTPWriteTimeout from now (from the request read, as for a GET).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if r.ContentLength > 0 {
		if err := checkJSONMediaType(ct); err != nil {
			return err
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		// The connection is out of step with the request: not reused.
		w.Header().Set("Connection", "close")
		if mbe := new(http.MaxBytesError); errors.As(err, &mbe) {
			return fmt.Errorf("%w: body larger than %d bytes", errInvalidArgument, mbe.Limit)
		}
		return fmt.Errorf("%w: reading the body: %w (a request must arrive whole within --http-read-timeout, %s)", errInvalidArgument, err, s.cfg.HTTPReadTimeout)
	}
	if len(body) > 0 {
		if err := checkJSONMediaType(ct); err != nil {
			return err
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.setWriteDeadline(http.NewResponseController(w), s.cfg.HTTPWriteTimeout)
	return nil
}

// checkJSONMediaType accepts application/json, with no parameter but a
// charset of utf-8 (JSON is UTF-8).
func checkJSONMediaType(ct string) error {
	if ct == "" {
		return fmt.Errorf("%w: a body without Content-Type (want %s)", errUnsupportedMediaType, api.JSONContentType)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("%w: Content-Type %q: %v (want %s)", errUnsupportedMediaType, ct, err, api.JSONContentType)
	}
	if mt != api.JSONContentType {
		return fmt.Errorf("%w: Content-Type %q (want %s)", errUnsupportedMediaType, ct, api.JSONContentType)
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return fmt.Errorf("%w: Content-Type %q: parameter %s=%s (JSON is utf-8)", errUnsupportedMediaType, ct, k, v)
		}
	}
	return nil
}

// postOnly serves a POST-only route: any other method gets a typed 405
// (hint, if any, ends its message); a POST's body is checked and read
// (readBody) before h.
func (s *Server) postOnly(route, hint string, h http.Handler) http.Handler {
	return s.m.instrument(route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			s.writeError(w, r, route, fmt.Errorf("%w: %s %s (POST only%s)", errMethodNotAllowed, r.Method, r.URL.Path, hint))
			return
		}
		if err := s.readBody(w, r); err != nil {
			s.writeError(w, r, route, err)
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// canonicalPaths refuses, with a typed 400, a path that has an empty, "."
// or ".." segment (a trailing slash aside), instead of the mux's redirect to
// the cleaned path: "/v1/objects/../owners" names no object, and a client
// that followed the redirect would read another route's answer as its own.
func (s *Server) canonicalPaths(h http.Handler) http.Handler {
	refuse := s.m.instrument("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, "", fmt.Errorf("%w: path %q has an empty, \".\" or \"..\" segment", errInvalidArgument, r.URL.Path))
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := strings.CutPrefix(r.URL.Path, "/"); ok {
			segs := strings.Split(p, "/")
			for i, seg := range segs {
				if seg == "." || seg == ".." || (seg == "" && i < len(segs)-1) {
					refuse.ServeHTTP(w, r)
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// authorize, when the API serves TLS, admits a request only if the role of
// its verified client certificate may: reads (GET, HEAD) need
// mtls.ActionRead, everything else mtls.ActionOperate; refused: 403
// permission_denied. It is the one place that checks who calls the API.
func (s *Server) authorize(h http.Handler) http.Handler {
	if !s.cfg.TLSFiles().Enabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		action := mtls.ActionOperate
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			action = mtls.ActionRead
		}
		id, err := mtls.RequestIdentity(r)
		if err == nil {
			err = mtls.Allowed(id, action)
		}
		if err != nil {
			s.writeError(w, r, "", err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// routes is the API's mux. Every route is GET (HEAD too), but
// /v1/relocations, which is GET or POST, and the POST-only routes (drain,
// rebalance, groups); any other method gets a typed 405, an unknown path a
// typed 404, a path that is not canonical a typed 400 (canonicalPaths), and
// a POST body that is not JSON a typed 415 (readBody).
func (s *Server) routes(st *authority.Store, cli *clientv3.Client, pool *adminPool, events *eventHub) http.Handler {
	h := &handlers{s: s, st: st, del: st.Batched(authority.Limits{}), cli: cli, pool: pool, events: events}
	mux := http.NewServeMux()
	handle := func(pattern string, f apiHandler) {
		mux.Handle(pattern, s.m.instrument(pattern, s.getOnly(s.serve(pattern, f, s.cfg.RequestTimeout))))
	}
	const relocations = "/v1/relocations"
	list, move := s.serve(relocations, h.relocations, s.cfg.RequestTimeout), s.serve(relocations, h.relocate, 0)
	mux.Handle(relocations, s.m.instrument(relocations, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			list(w, r)
		case http.MethodPost:
			if err := s.readBody(w, r); err != nil {
				s.writeError(w, r, relocations, err)
				return
			}
			move(w, r)
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			s.writeError(w, r, relocations, fmt.Errorf("%w: %s %s (GET or POST only)", errMethodNotAllowed, r.Method, r.URL.Path))
		}
	})))
	handle(relocations+"/{id}", h.relocation)
	handle("/v1/owners", h.owners)
	mux.Handle(drainRoute, s.postOnly(drainRoute, "", http.HandlerFunc(h.drainHTTP))) // drain.go: streams
	handle("/v1/controllers", h.controllers)
	handle("/v1/etcd", h.etcd)
	h.rebalanceRoutes(mux)
	h.groupRoutes(mux) // groups.go
	handle("/v1/objects", h.objects)
	h.objectRoute(mux) // delete.go: GET and DELETE
	mux.Handle(eventsRoute, s.m.instrument(eventsRoute, s.getOnly(http.HandlerFunc(h.eventsHTTP))))
	handle("/healthz", h.healthz)
	handle("/readyz", h.readyz)
	s.dashboard(mux) // dashboard.go: / and /ui/
	handle("/", func(_ context.Context, r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: %s", errRouteNotFound, r.URL.Path)
	})
	mux.Handle("/metrics", s.m.instrument("/metrics", s.getOnly(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))))
	return s.authorize(s.sameOrigin(s.canonicalPaths(mux)))
}

// sameOrigin refuses, with a typed 403, a request that changes something
// (any method but GET and HEAD) sent by a web page of another origin: a
// browser names the page's origin (Origin, Sec-Fetch-Site), so a page
// elsewhere cannot make a browser that can reach locationd (the
// dashboard's user's) relocate or drain. Clients that are not browsers
// send neither header and are not affected.
func (s *Server) sameOrigin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			site := r.Header.Get("Sec-Fetch-Site")
			origin := r.Header.Get("Origin")
			cross := site != "" && site != "same-origin" && site != "none"
			if origin != "" && origin != "null" {
				u, err := url.Parse(origin)
				cross = cross || err != nil || u.Host != r.Host
			} else if origin == "null" {
				cross = true
			}
			if cross {
				s.writeError(w, r, "", fmt.Errorf("%w: %s %s from a page of another origin (Origin %q, Sec-Fetch-Site %q)", errCrossOrigin, r.Method, r.URL.Path, origin, site))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// getOnly refuses every method but GET and HEAD with a typed 405.
func (s *Server) getOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			s.writeError(w, r, "", fmt.Errorf("%w: %s %s (GET only)", errMethodNotAllowed, r.Method, r.URL.Path))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, route string, err error) {
	e := toAPIError(err)
	ev := s.log.Debug()
	if e.Status >= 500 {
		ev = s.log.Warn()
	}
	ev.Str("route", route).Str("path", r.URL.Path).Str("code", e.Code).Err(err).Msg("request failed")
	writeJSON(w, e.Status, api.ErrorBody{Error: e})
}

// query returns the query parameters of r, refusing unknown and repeated
// ones: a typo (?ownr=x) must fail loudly, not silently list everything.
func query(r *http.Request, allowed ...string) (map[string]string, error) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: query: %w", errInvalidArgument, err)
	}
	out := make(map[string]string, len(vals))
	for k, vs := range vals {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			if len(allowed) == 0 {
				return nil, fmt.Errorf("%w: unknown query parameter %q (this route takes none)", errInvalidArgument, k)
			}
			return nil, fmt.Errorf("%w: unknown query parameter %q (known: %s)", errInvalidArgument, k, strings.Join(allowed, ", "))
		}
		if len(vs) != 1 {
			return nil, fmt.Errorf("%w: query parameter %q given %d times", errInvalidArgument, k, len(vs))
		}
		out[k] = vs[0]
	}
	return out, nil
}

// queryBool is the optional boolean parameter name of q (nil when absent):
// exactly "true" or "false", else errInvalidArgument.
func queryBool(q map[string]string, name string) (*bool, error) {
	v, given := q[name]
	switch {
	case !given:
		return nil, nil
	case v == "true":
		return new(true), nil
	case v == "false":
		return new(false), nil
	}
	return nil, fmt.Errorf("%w: %s %q (want true or false)", errInvalidArgument, name, v)
}
