package locationd

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/api"
)

// recoveryConfig is the recovery controller's configuration from c's flags;
// id and http name this locationd in the leader value.
func (c *Config) recoveryConfig(id, http string) recovery.Config {
	rc := recovery.DefaultConfig()
	rc.ID, rc.HTTP = id, http
	rc.TTL = c.ElectionTTL
	rc.Recover = c.RecoverOrphans
	rc.Rate = c.RecoveryRate
	return rc
}

// controllerID names this process among the candidates: "<hostname>/<pid>".
func controllerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "locationd"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// startControllers creates the recovery controller (it campaigns in the
// election at once) and runs it on one goroutine until stop is called; stop
// cancels it and waits: a leader revokes its election lease on the way out,
// so another locationd leads at once. Call after HTTPAddr is known.
func (s *Server) startControllers(cli *clientv3.Client) (stop func(), err error) {
	ctrl, err := recovery.New(cli, s.keys, s.cfg.recoveryConfig(controllerID(), cmp.Or(s.cfg.AdvertiseHTTP, s.HTTPAddr())),
		s.log.With().Str("component", "controller").Logger(), recovery.NewMetrics(s.reg))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.ctrl = ctrl
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = ctrl.Run(ctx) })
	return func() {
		cancel()
		wg.Wait()
	}, nil
}

func (s *Server) controller() *recovery.Controller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctrl
}

// controllers is GET /v1/controllers: who leads the recovery controller
// (read from its election key, so every locationd gives the same answer)
// and this locationd's own candidate.
func (h *handlers) controllers(ctx context.Context, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	ctrl := h.s.controller()
	if ctrl == nil {
		return nil, fmt.Errorf("%w: the controllers are not started yet", errUnavailable)
	}
	l, found, err := recovery.ReadLeader(ctx, h.cli, h.s.keys)
	if err != nil {
		return nil, err
	}
	cfg, st := ctrl.Config(), ctrl.Status()
	out := api.Controller{Name: recovery.Name, Self: api.ControllerSelf{
		ID: cfg.ID, HTTP: cfg.HTTP, Leader: st.Leader, Terms: st.Terms,
		ElectionTTLMs: cfg.TTL.Milliseconds(), RecoverOrphans: cfg.Recover, RecoveryRate: cfg.Rate,
		Recovered: st.Recovered, Failed: st.Failed,
	}}
	if st.Leader {
		out.Self.SinceUnixMs = st.Since.UnixMilli()
		out.Self.Since = timeJSON(out.Self.SinceUnixMs)
	}
	if found {
		i := l.Info
		out.Leader = &api.ControllerLeader{
			ID: i.ID, HTTP: i.HTTP, Since: timeJSON(i.SinceUnixMs), SinceUnixMs: i.SinceUnixMs, Revision: l.Revision,
			RecoverOrphans: i.RecoverOrphans, Orphans: i.Orphans, OrphansRevision: i.OrphansRevision, Asleep: i.Asleep,
			Recovered: i.Recovered, Failed: i.Failed,
		}
	}
	return api.ControllersResponse{Controllers: []api.Controller{out}}, nil
}
