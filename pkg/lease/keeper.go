package lease

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// maxUpdateAttempts bounds the re-read-and-retry loop of Update.
const maxUpdateAttempts = 3

// Keeper holds one owner's lease and its key owners/<ownerId> (doc.go).
type Keeper struct {
	c       *clientv3.Client
	cfg     Config // defaults applied
	clock   Clock
	log     zerolog.Logger
	key     string
	leaseID clientv3.LeaseID
	gen     int64

	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // lease-keepalive and lease-deadline

	updateMu sync.Mutex // one Update at a time: each compares the ModRevision the previous one produced

	mu     sync.Mutex
	st     state
	desc   Descriptor
	modRev int64 // ModRevision of the owner key as last written or read by this keeper

	closeOnce sync.Once
	closeErr  error
}

// Start grants a lease, creates owners/<OwnerID> bound to it and starts keeping
// it alive. ctx bounds Start only (each etcd call is also bounded by
// RequestTimeout); the keeper then lives until its Ctx is done. Values of ctx
// are inherited by Ctx, its cancellation is not.
//
// If the key already exists, Start waits up to AcquireWait for it to be deleted
// (its lease expired or revoked), then refuses with a *DuplicateOwnerError; it
// never writes a key it did not create. Every lease Start granted and did not
// use is revoked.
func Start(ctx context.Context, c *clientv3.Client, keys keyspace.Keys, cfg Config) (*Keeper, error) {
	if c == nil {
		return nil, &ConfigError{Field: "client", Reason: "nil etcd client"}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Descriptor.OwnerID = cfg.OwnerID
	cfg.Descriptor = cloneDescriptor(cfg.Descriptor)
	k := &Keeper{
		c:     c,
		cfg:   cfg,
		clock: cfg.Clock,
		log:   cfg.Logger.With().Str("owner", cfg.OwnerID).Logger(),
		key:   keys.Owner(cfg.OwnerID),
	}
	waitUntil := k.clock.Now().Add(cfg.AcquireWait)
	for {
		held, rev, err := k.acquire(ctx)
		if err != nil {
			return nil, err
		}
		if held == nil {
			break
		}
		left := waitUntil.Sub(k.clock.Now())
		if cfg.AcquireWait == 0 || left <= 0 {
			k.log.Warn().Str("event", "refused").Int64("held_generation", held.Generation).Msg("lease: owner id already held")
			return nil, held
		}
		k.log.Info().Str("event", "acquire-wait").Int64("held_generation", held.Generation).Dur("wait", left).
			Msg("lease: owner key exists, waiting for it to disappear")
		gone, err := k.waitGone(ctx, rev, left)
		if err != nil {
			return nil, fmt.Errorf("lease: start %s: waiting for generation %d to disappear: %w", cfg.OwnerID, held.Generation, err)
		}
		if !gone {
			k.log.Warn().Str("event", "refused").Int64("held_generation", held.Generation).Msg("lease: owner id still held after AcquireWait")
			return nil, held
		}
	}
	// The Txn may have taken most of the TTL (slow etcd): a keeper that is
	// already past its deadline is never handed out.
	if err := k.st.expireIfDue(k.clock.Now()); err != nil {
		k.revoke(ctx, k.leaseID)
		return nil, fmt.Errorf("lease: start %s: %w", cfg.OwnerID, err)
	}
	k.log = k.log.With().Int64("generation", k.gen).Str("lease", fmt.Sprintf("%x", int64(k.leaseID))).Logger()
	k.ctx, k.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	k.spawn("lease-keepalive", k.runKeepAlive)
	k.spawn("lease-deadline", k.runDeadline)
	k.log.Info().Str("event", "acquired").Dur("ttl", k.st.ttl).Msg("lease: owner key created")
	return k, nil
}

// spawn runs f in a goroutine owned by k (waited for by Close), labelled with
// its name for pprof.
func (k *Keeper) spawn(name string, f func(context.Context)) {
	k.wg.Go(func() {
		pprof.Do(k.ctx, pprof.Labels("goroutine", name, "owner", k.cfg.OwnerID), f)
	})
}

// sleep waits d on the keeper's clock; false if ctx ended first.
func (k *Keeper) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := k.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// runKeepAlive is the goroutine "lease-keepalive": one KeepAliveOnce every
// KeepAliveInterval counted from the previous send, retried with a short
// backoff after an error, until the keeper is fenced. doc.go says why not
// clientv3's KeepAlive channel.
func (k *Keeper) runKeepAlive(ctx context.Context) {
	interval := k.cfg.KeepAliveInterval
	minBackoff := max(interval/16, 10*time.Millisecond)
	maxBackoff := max(interval/2, minBackoff)
	backoff := minBackoff
	wait := interval
	failures := 0
	var lastWarn time.Time
	for {
		if !k.sleep(ctx, wait) {
			return
		}
		sentAt := k.clock.Now() // before the send: the deadline must not count the request's own latency
		rctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), k.cfg.RequestTimeout)
		resp, err := k.c.KeepAliveOnce(rctx, k.leaseID)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			k.confirm(sentAt, time.Duration(resp.TTL)*time.Second)
			if failures > 0 {
				k.log.Info().Str("event", "keepalive-recovered").Int("failures", failures).Msg("lease: keep-alive confirmed again")
			}
			failures, backoff = 0, minBackoff
			wait = sentAt.Add(interval).Sub(k.clock.Now())
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			k.fence(k.lostErr("keep-alive: lease not found in etcd (revoked, or expired there)"))
			return
		default:
			failures++
			if now := k.clock.Now(); failures == 1 || now.Sub(lastWarn) >= k.cfg.TTL {
				lastWarn = now
				k.log.Warn().Err(err).Str("event", "keepalive-failed").Int("failures", failures).
					Time("deadline", k.Deadline()).Msg("lease: keep-alive failed, retrying until the deadline")
			}
			wait = backoff
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// runDeadline is the goroutine "lease-deadline": it sleeps until the current
// deadline and fences the keeper with ErrLeaseExpired if no confirmation moved
// the deadline meanwhile; otherwise it sleeps until the new one.
func (k *Keeper) runDeadline(ctx context.Context) {
	for {
		k.mu.Lock()
		now := k.clock.Now()
		fenced := k.checkLocked(now)
		deadline, done := k.st.deadline, k.st.cause != nil
		k.mu.Unlock()
		if fenced != nil {
			k.logFence(fenced)
		}
		if done {
			return
		}
		if !k.sleep(ctx, deadline.Sub(now)) {
			return
		}
	}
}

// confirm applies a keep-alive reply (state.confirm), at the time it is
// processed.
func (k *Keeper) confirm(sentAt time.Time, ttl time.Duration) {
	k.mu.Lock()
	_, fenced := k.st.confirm(sentAt, ttl, k.clock.Now())
	if fenced != nil {
		k.cancel(fenced)
	}
	k.mu.Unlock()
	if fenced != nil {
		k.logFence(fenced)
	}
}

// checkLocked fences the keeper if now is past the deadline. k.mu held.
func (k *Keeper) checkLocked(now time.Time) error {
	fenced := k.st.expireIfDue(now)
	if fenced != nil {
		k.cancel(fenced)
	}
	return fenced
}

// fence ends the keeper with cause unless it already ended; the first cause
// stays.
func (k *Keeper) fence(cause error) {
	k.mu.Lock()
	fenced := k.st.fence(cause)
	if fenced != nil {
		k.cancel(fenced)
	}
	k.mu.Unlock()
	if fenced != nil {
		k.logFence(fenced)
	}
}

// logFence logs a fence that was not asked for. A clean stop (Close, whose
// cause is ErrClosed) is not a fence worth a line: Close logs its own.
func (k *Keeper) logFence(cause error) {
	if errors.Is(cause, ErrClosed) {
		return
	}
	k.log.Warn().Str("event", "fenced").Str("cause", cause.Error()).Msg("lease: owner fenced")
}

func (k *Keeper) lostErr(why string) error {
	return fmt.Errorf("%w: owner %s generation %d lease %x: %s", ErrLeaseLost, k.cfg.OwnerID, k.gen, int64(k.leaseID), why)
}

// OwnerID is the owner id of the keeper.
func (k *Keeper) OwnerID() string { return k.cfg.OwnerID }

// Generation is the CreateRevision of owners/<ownerId>: with OwnerID, the
// identity of this owner.
func (k *Keeper) Generation() int64 { return k.gen }

// LeaseID is the lease the owner key is bound to.
func (k *Keeper) LeaseID() clientv3.LeaseID { return k.leaseID }

// Key is owners/<ownerId> under the keyspace given to Start.
func (k *Keeper) Key() string { return k.key }

// OwnerCmp is the comparison every ownership Txn of this owner must include:
// the owner key still exists with this generation. The keeper does not fence
// etcd writes by itself; this does (doc.go).
func (k *Keeper) OwnerCmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(k.key), "=", k.gen)
}

// Ctx is cancelled, with the cause Err returns, when the keeper is fenced:
// lease lost or revoked, Close, or the local deadline passed unconfirmed.
// Work that relies on ownership runs under it.
func (k *Keeper) Ctx() context.Context { return k.ctx }

// Done is Ctx().Done().
func (k *Keeper) Done() <-chan struct{} { return k.ctx.Done() }

// Err is nil while the keeper is valid, then the first cause for ever:
// ErrLeaseExpired, ErrLeaseLost or ErrClosed, wrapped with detail. If the
// deadline has passed and the deadline goroutine has not run yet, Err fences
// the keeper itself, so that Err never reports a lapsed lease as valid.
func (k *Keeper) Err() error {
	k.mu.Lock()
	fenced := k.checkLocked(k.clock.Now())
	err := k.st.cause
	k.mu.Unlock()
	if fenced != nil {
		k.logFence(fenced)
	}
	return err
}

// Deadline is the current conservative local deadline (monotonic): the send
// time of the newest confirmed keep-alive + the granted TTL − Margin.
func (k *Keeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.st.deadline
}

// Status is Evaluate of a snapshot of the keeper at now.
func (k *Keeper) Status(now time.Time) Status {
	k.mu.Lock()
	in := k.st.input()
	k.mu.Unlock()
	return Evaluate(in, now)
}

// Descriptor is the descriptor as last written or read by this keeper.
func (k *Keeper) Descriptor() Descriptor {
	k.mu.Lock()
	defer k.mu.Unlock()
	return cloneDescriptor(k.desc)
}

// Update changes the descriptor with one compare-and-swap on the keeper's own
// key: it applies mutate to a copy of the current descriptor and writes it,
// still bound to the lease, if the key has the ModRevision this keeper last
// saw and this generation. If only the ModRevision moved (another writer), it
// adopts the stored value and retries (3 attempts, then ErrUpdateConflict);
// mutate may thus run more than once. If the key is gone or belongs to another
// generation, the keeper is fenced with ErrLeaseLost. A fenced keeper refuses
// at once. OwnerID cannot be changed. An etcd error leaves the outcome
// unknown; the next Update re-reads.
func (k *Keeper) Update(ctx context.Context, mutate func(*Descriptor)) (Descriptor, error) {
	k.updateMu.Lock()
	defer k.updateMu.Unlock()
	for range maxUpdateAttempts {
		if err := k.Err(); err != nil {
			return Descriptor{}, fmt.Errorf("lease: update owner %s: %w", k.cfg.OwnerID, err)
		}
		k.mu.Lock()
		next, modRev := cloneDescriptor(k.desc), k.modRev
		k.mu.Unlock()
		mutate(&next)
		next.OwnerID = k.cfg.OwnerID
		value := string(next.Encode())

		rctx, cancel := k.requestCtx(ctx)
		resp, err := k.c.Txn(rctx).
			If(clientv3.Compare(clientv3.ModRevision(k.key), "=", modRev), k.OwnerCmp()).
			Then(clientv3.OpPut(k.key, value, clientv3.WithLease(k.leaseID))). // never without WithLease: it would detach the key
			Else(clientv3.OpGet(k.key)).
			Commit()
		cancel()
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				lost := k.lostErr("update: lease not found in etcd")
				k.fence(lost)
				return Descriptor{}, lost
			}
			if cause := context.Cause(k.ctx); cause != nil {
				return Descriptor{}, fmt.Errorf("lease: update owner %s (outcome unknown): %w", k.cfg.OwnerID, cause)
			}
			return Descriptor{}, fmt.Errorf("lease: update owner %s (outcome unknown, the next Update re-reads): %w", k.cfg.OwnerID, err)
		}
		if resp.Succeeded {
			k.mu.Lock()
			k.desc, k.modRev = next, resp.Header.Revision
			k.mu.Unlock()
			k.log.Info().Str("event", "updated").Str("state", string(next.State)).Msg("lease: descriptor updated")
			return cloneDescriptor(next), nil
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 || kvs[0].CreateRevision != k.gen {
			why := "update: owner key deleted"
			if len(kvs) > 0 {
				why = fmt.Sprintf("update: owner key re-created as generation %d", kvs[0].CreateRevision)
			}
			lost := k.lostErr(why)
			k.fence(lost)
			return Descriptor{}, lost
		}
		k.mu.Lock()
		if d, derr := DecodeDescriptor(kvs[0].Value); derr == nil {
			k.desc = d
		}
		k.modRev = kvs[0].ModRevision
		k.mu.Unlock()
	}
	return Descriptor{}, fmt.Errorf("%w: owner %s: %d attempts", ErrUpdateConflict, k.cfg.OwnerID, maxUpdateAttempts)
}

// requestCtx bounds one etcd call by ctx, by RequestTimeout and by the
// keeper's own Ctx (a write in flight when the keeper is fenced is abandoned).
func (k *Keeper) requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	cctx, cancelCause := context.WithCancelCause(ctx)
	stop := context.AfterFunc(k.ctx, func() { cancelCause(context.Cause(k.ctx)) })
	tctx, cancel := context.WithTimeout(cctx, k.cfg.RequestTimeout)
	return tctx, func() {
		cancel()
		stop()
		cancelCause(nil)
	}
}

// Close ends the keeper, in this order: it fences it (Ctx is cancelled with
// ErrClosed unless an earlier cause is already there: Err keeps the first);
// stops the keep-alive and deadline goroutines and waits for them; then
// revokes the lease, so that owners/<ownerId> disappears at once instead of
// after the TTL. ctx (and RequestTimeout) bound only the revoke; the wait for
// the goroutines is not bounded by ctx but is prompt, since every blocking
// operation in them selects on the keeper's Ctx. If the revoke fails (or the
// client is already closed), Close returns the error and the key disappears
// when the lease expires; a lease that is already gone is not an error.
// Close is idempotent: later calls wait for the first and return its result.
// After Close, Update returns an error wrapping the keeper's cause and Status
// is final.
func (k *Keeper) Close(ctx context.Context) error {
	k.closeOnce.Do(func() {
		k.fence(fmt.Errorf("%w: owner %s generation %d", ErrClosed, k.cfg.OwnerID, k.gen))
		k.wg.Wait()
		err := k.c.Ctx().Err() // a closed client would only retry until the timeout
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, k.cfg.RequestTimeout)
			_, err = k.c.Revoke(rctx, k.leaseID)
			cancel()
		}
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			k.closeErr = fmt.Errorf("lease: close owner %s: revoke lease %x (the key stays until the lease expires): %w", k.cfg.OwnerID, int64(k.leaseID), err)
			k.log.Warn().Err(err).Str("event", "revoke-failed").Msg("lease: revoke failed on close")
			return
		}
		k.log.Info().Str("event", "closed").Msg("lease: lease revoked (or already gone), owner key deleted")
	})
	return k.closeErr
}

func cloneDescriptor(d Descriptor) Descriptor {
	d.Types = slices.Clone(d.Types)
	return d
}
