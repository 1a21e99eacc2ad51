package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/meshloc/meshloc/internal/relist"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Name is the controller's name: its election prefix is
// keyspace.Controller(Name).
const Name = "recovery"

// Errors of this package.
var (
	// ErrInvalidConfig: a Config field, or a relation between fields, that cannot work.
	ErrInvalidConfig = errors.New("recovery: invalid config")
	// ErrNotLeader ends a term: the election key is gone or was re-created
	// (a proclaim or a guarded write found it so).
	ErrNotLeader = errors.New("recovery: not the leader any more")
	// ErrSessionLost ends a term: the election lease expired or could not
	// be kept alive.
	ErrSessionLost = errors.New("recovery: election session lost")
)

// Config of a Controller.
type Config struct {
	// ID names this controller in the leader value (locationd uses
	// "<hostname>/<pid>"); required.
	ID string
	// HTTP is this locationd's API address, published while it leads so
	// operators and tests can find the leader.
	HTTP string
	// TTL (--election-ttl, default 5s): a leader that dies or is cut off
	// from etcd is replaced within this long. The election lease is granted
	// one second shorter (whole seconds, rounded up, at least 1 s), because
	// etcd removes an expired lease on a check every 500 ms after its TTL
	// ran out; etcd grants at least 1.5 election timeouts (2 s with its
	// defaults), so the bound holds from 3 s on.
	TTL time.Duration
	// Recover (--recover-orphans, default false) re-activates orphans on live
	// nodes; false only reports them.
	Recover bool
	// Rate (--recovery-rate, default 10,000) caps recoveries: at most this
	// many orphans per second are attempted. Orphans are recovered in steps
	// of up to a tenth of a second's worth (at most 1,024), whose
	// transactions share etcd requests, so 100,000 orphans of a dead node
	// take about 10 s at the default when etcd keeps up; a lower rate
	// spreads the same writes (and the watch events every location cache
	// receives for them) over longer.
	Rate float64
	// Limits are the etcd cluster's --max-txn-ops and --max-request-bytes
	// (default etcd's defaults): one request carries as many recoveries,
	// and reads as many records, as they allow.
	Limits authority.Limits
	// Grace (default 5s) after a relocating orphan's intent deadline during
	// which it is left to its relocation's target (which may still commit).
	Grace time.Duration
	// ProclaimEvery (default 1s) bounds how often the leader rewrites its
	// leader value when its figures change.
	ProclaimEvery time.Duration
	// Retry (default 2s): how often the leader looks again at orphans it
	// could not recover yet (deferred, no target, failed).
	Retry time.Duration
}

// DefaultRate is Config.Rate's default (orphans per second): a dead node's
// 100,000 objects in about 10 s, well within a minute.
const DefaultRate = 10_000

// MaxRate is the largest Config.Rate.
const MaxRate = 1_000_000

// DefaultConfig is the configuration of the flags' defaults.
func DefaultConfig() Config {
	return Config{TTL: 5 * time.Second, Rate: DefaultRate, Limits: authority.DefaultLimits(), Grace: 5 * time.Second, ProclaimEvery: time.Second, Retry: 2 * time.Second}
}

// Validate checks c. It changes nothing.
func (c Config) Validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: an id is required", ErrInvalidConfig)
	case c.TTL < time.Second || c.TTL > time.Hour:
		return fmt.Errorf("%w: --election-ttl %s (want 1s..1h)", ErrInvalidConfig, c.TTL)
	case math.IsNaN(c.Rate) || c.Rate <= 0 || c.Rate > MaxRate:
		return fmt.Errorf("%w: --recovery-rate %v (want objects per second in (0, %d])", ErrInvalidConfig, c.Rate, MaxRate)
	case c.Limits.MaxTxnOps != 0 && c.Limits.MaxTxnOps < 8:
		return fmt.Errorf("%w: --max-txn-ops %d (etcd's default is %d; a recovery takes 5 operations)", ErrInvalidConfig, c.Limits.MaxTxnOps, authority.DefaultMaxTxnOps)
	case c.Grace < 0 || c.ProclaimEvery <= 0 || c.Retry <= 0:
		return fmt.Errorf("%w: grace, proclaim and retry intervals must be positive", ErrInvalidConfig)
	}
	return nil
}

// ttlSeconds is the election lease's TTL: TTL in whole seconds (rounded
// up) less one, at least 1 (see Config.TTL).
func (c Config) ttlSeconds() int { return max(1, int((c.TTL+time.Second-1)/time.Second)-1) }

// LeaderInfo is the value of the leader's election key: who leads and its
// figures, as last proclaimed.
type LeaderInfo struct {
	ID   string `json:"id"`
	HTTP string `json:"http"`
	// SinceUnixMs: when it won the election (0 until it proclaimed).
	SinceUnixMs    int64 `json:"sinceUnixMs"`
	RecoverOrphans bool  `json:"recoverOrphans"`
	// Orphans is the number of orphaned objects at OrphansRevision.
	Orphans         int   `json:"orphans"`
	OrphansRevision int64 `json:"orphansRevision"`
	// Asleep is the number of sleeping objects at OrphansRevision.
	Asleep int `json:"asleep"`
	// Recovered and Failed count this process's recoveries since it started.
	Recovered int64 `json:"recovered"`
	Failed    int64 `json:"failed"`
}

// Leader is the current leader as read from etcd.
type Leader struct {
	Info LeaderInfo
	// Key is the leader's election key; Revision its CreateRevision (the
	// term's fencing token).
	Key      string
	Revision int64
	// LeaseID of the leader's session.
	LeaseID int64
}

// ReadLeader reads the current leader of the recovery controller's
// election; false when no candidate runs.
func ReadLeader(ctx context.Context, cli *clientv3.Client, keys keyspace.Keys) (Leader, bool, error) {
	resp, err := cli.Get(ctx, keys.Controller(Name)+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return Leader{}, false, fmt.Errorf("recovery: read leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Leader{}, false, nil
	}
	kv := resp.Kvs[0]
	l := Leader{Key: string(kv.Key), Revision: kv.CreateRevision, LeaseID: kv.Lease}
	if err := json.Unmarshal(kv.Value, &l.Info); err != nil {
		l.Info = LeaderInfo{ID: string(kv.Value)} // not ours to judge: show it
	}
	return l, true, nil
}

// Status is this controller's own view.
type Status struct {
	// Leader: this controller leads now (since Since).
	Leader bool
	Since  time.Time
	// Terms is how often it won the election.
	Terms int
	// Orphans at OrphansRevision (while it leads).
	Orphans         int
	OrphansRevision int64
	// Asleep: sleeping objects at OrphansRevision.
	Asleep int
	// Recovered and Failed count its recoveries since it started.
	Recovered, Failed int64
	// Requests counts the etcd write requests its recoveries took: each
	// carries many (Recovered/Requests of them on average).
	Requests int64
}

// Controller is one candidate; see the package doc.
type Controller struct {
	cli  *clientv3.Client
	keys keyspace.Keys
	// stores are the recoverer's lanes (batched Stores, stepsInFlight of
	// them); lanes holds those free.
	stores []*authority.Store
	lanes  chan *authority.Store
	cfg    Config
	log    zerolog.Logger
	m      *Metrics
	now    func() time.Time

	// beforeWrite, when set (tests), sees each step's recoveries after its
	// records were read and before they are written.
	beforeWrite func([]authority.RecoverRequest)

	mu     sync.Mutex
	status Status
	logged time.Time // when the orphan count was last logged
}

// New returns a controller that is not running yet; m are its metrics
// (NewMetrics, registered once per registry).
func New(cli *clientv3.Client, keys keyspace.Keys, cfg Config, log zerolog.Logger, m *Metrics) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{cli: cli, keys: keys, lanes: make(chan *authority.Store, stepsInFlight), cfg: cfg, log: log.With().Str("controller", Name).Logger(), m: m, now: time.Now}
	for range stepsInFlight {
		st := authority.New(cli, keys).Batched(cfg.Limits)
		c.stores = append(c.stores, st)
		c.lanes <- st
	}
	return c, nil
}

// Status is a copy of this controller's status.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Config of the controller.
func (c *Controller) Config() Config { return c.cfg }

// Run campaigns, leads while elected, and campaigns again after a lost
// term, until ctx ends; it returns nil then. On the way out a leader's lease
// is revoked, so the next candidate leads at once. Every goroutine it starts
// has ended when it returns.
func (c *Controller) Run(ctx context.Context) error {
	return relist.Run(ctx, func(ctx context.Context) error {
		err := c.term(ctx)
		if ctx.Err() == nil {
			c.log.Warn().Err(err).Msg("election term ended; campaigning again")
		}
		return err
	})
}

// term is one session: campaign, then lead until the session, the key or
// ctx ends.
func (c *Controller) term(ctx context.Context) error {
	sess, err := concurrency.NewSession(c.cli, concurrency.WithTTL(c.cfg.ttlSeconds()), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("recovery: election session: %w", err)
	}
	defer c.endSession(sess)
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(sess.Ctx(), func() { cancel(ErrSessionLost) })()

	e := concurrency.NewElection(sess, c.keys.Controller(Name))
	val, _ := json.Marshal(LeaderInfo{ID: c.cfg.ID, HTTP: c.cfg.HTTP, RecoverOrphans: c.cfg.Recover})
	if err := e.Campaign(tctx, string(val)); err != nil {
		if cause := context.Cause(tctx); cause != nil {
			return cause
		}
		return fmt.Errorf("recovery: campaign: %w", err)
	}
	since := c.now()
	c.mu.Lock()
	c.status.Leader, c.status.Since = true, since
	c.status.Terms++
	c.mu.Unlock()
	c.m.leader.Set(1)
	c.log.Info().Str("key", e.Key()).Int64("revision", e.Rev()).Bool("recover", c.cfg.Recover).Msg("leading")
	defer func() {
		c.m.leader.Set(0)
		c.m.orphans.Set(0)
		c.mu.Lock()
		c.status.Leader, c.status.Orphans, c.status.OrphansRevision, c.status.Asleep = false, 0, 0, 0
		c.mu.Unlock()
		c.log.Info().Err(context.Cause(tctx)).Msg("not leading any more")
	}()

	c.lead(tctx, cancel, e, since)
	return context.Cause(tctx)
}

// endSession stops the keep-alive and revokes the lease (bounded), so the
// next candidate does not wait for the TTL. The revoke may fail (etcd gone,
// client closed): the lease then expires by itself.
func (c *Controller) endSession(sess *concurrency.Session) {
	sess.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = c.cli.Revoke(ctx, sess.Lease())
}

// lead runs the leader's work until ctx ends: the watch-fed view, the
// proclaimer, and (if enabled) the recoverer.
func (c *Controller) lead(ctx context.Context, cancel context.CancelCauseFunc, e *concurrency.Election, since time.Time) {
	v := newView(c.keys)
	kick := make(chan struct{}, 1)
	guard := &authority.Guard{Key: e.Key(), CreateRevision: e.Rev()}
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = relist.Run(ctx, func(ctx context.Context) error { return c.follow(ctx, v, kick) })
	})
	wg.Go(func() { c.proclaim(ctx, cancel, e, since) })
	wg.Go(func() { c.watchKey(ctx, cancel, e) })
	if c.cfg.Recover {
		wg.Go(func() { c.recoverLoop(ctx, cancel, v, guard, kick) })
		wg.Go(func() { c.sweepLoop(ctx) }) // bulk.go
	}
	wg.Wait()
}

// watchKey ends the term as soon as etcd deletes the election key (its
// lease expired or was revoked), without waiting for the keep-alive to say
// so. A broken watch is not a loss: the session and the guard still hold.
func (c *Controller) watchKey(ctx context.Context, cancel context.CancelCauseFunc, e *concurrency.Election) {
	for ctx.Err() == nil {
		resp, err := c.cli.Get(ctx, e.Key())
		if err == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev()) {
			cancel(ErrNotLeader)
			return
		}
		from := e.Rev()
		if err == nil {
			from = resp.Header.Revision + 1
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range c.cli.Watch(wctx, e.Key(), clientv3.WithRev(from)) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != e.Rev() {
					wcancel()
					cancel(ErrNotLeader)
					return
				}
			}
		}
		wcancel()
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// info is the leader value now.
func (c *Controller) info(since time.Time) LeaderInfo {
	s := c.Status()
	return LeaderInfo{
		ID: c.cfg.ID, HTTP: c.cfg.HTTP, SinceUnixMs: since.UnixMilli(), RecoverOrphans: c.cfg.Recover,
		Orphans: s.Orphans, OrphansRevision: s.OrphansRevision, Asleep: s.Asleep, Recovered: s.Recovered, Failed: s.Failed,
	}
}

// proclaim rewrites the leader value at once, then whenever it changed, at
// most every ProclaimEvery. A proclaim that finds the key gone ends the term.
func (c *Controller) proclaim(ctx context.Context, cancel context.CancelCauseFunc, e *concurrency.Election, since time.Time) {
	t := time.NewTicker(c.cfg.ProclaimEvery)
	defer t.Stop()
	var last []byte
	for {
		info := c.info(since)
		b, _ := json.Marshal(info)
		if string(b) != string(last) {
			pctx, pcancel := context.WithTimeout(ctx, c.cfg.TTL)
			err := e.Proclaim(pctx, string(b))
			pcancel()
			switch {
			case errors.Is(err, concurrency.ErrElectionNotLeader):
				cancel(ErrNotLeader)
				return
			case err != nil && ctx.Err() == nil:
				c.log.Debug().Err(err).Msg("proclaim failed; retrying")
			case err == nil:
				last = b
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// follow lists owners and records at one revision, then follows one watch
// over [authority/, end of owners/) from the next revision, publishing the
// orphan count after each batch. It returns the watch's error (ErrCompacted
// and the like make relist.Run list again).
func (c *Controller) follow(ctx context.Context, v *view, kick chan<- struct{}) error {
	rev, err := v.load(ctx, c.cli)
	if err != nil {
		return err
	}
	c.publish(v, kick)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.cli.Watch(wctx, c.keys.AuthorityPrefix(), clientv3.WithRange(clientv3.GetPrefixRangeEnd(c.keys.OwnersPrefix())),
		clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return err
		}
		upTo := resp.Header.Revision
		if !resp.IsProgressNotify() && len(resp.Events) > 0 {
			upTo = resp.Events[len(resp.Events)-1].Kv.ModRevision
		}
		v.apply(resp.Events, upTo)
		c.publish(v, kick)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("recovery: watch closed")
}

// publish exports the orphan count and nudges the recoverer.
func (c *Controller) publish(v *view, kick chan<- struct{}) {
	n, asleep, rev := v.orphanCount()
	c.m.orphans.Set(float64(n))
	c.mu.Lock()
	// Logged when it changes from or to none, else at most every 5 s: a
	// recovery of 100,000 orphans changes it with every watch event.
	changed := c.status.Orphans != n && (n == 0 || c.status.Orphans == 0 || c.now().Sub(c.logged) >= 5*time.Second)
	c.status.Orphans, c.status.OrphansRevision, c.status.Asleep = n, rev, asleep
	if changed {
		c.logged = c.now()
	}
	c.mu.Unlock()
	if changed {
		c.log.Info().Int("orphans", n).Int64("revision", rev).Msg("orphaned objects")
	}
	if n > 0 {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}
