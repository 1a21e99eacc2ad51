package etcdfault

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ProbeTimeout bounds each question to one endpoint (within the caller's ctx).
const ProbeTimeout = 2 * time.Second

// pollInterval is the pause between two rounds of a wait or retry.
const pollInterval = 50 * time.Millisecond

var (
	// ErrNoLeader is returned when no endpoint asked answers as the leader
	// (an election is running, the cluster lost its quorum, or the leader's
	// endpoint was not given or did not answer).
	ErrNoLeader = errors.New("etcdfault: no leader among the endpoints")
	// ErrNotMember is returned by MoveLeader for a target that is not a
	// voting member of the cluster.
	ErrNotMember = errors.New("etcdfault: not a voting member")
	// ErrHashMismatch is returned (as a *HashMismatchError) by HashKVEqual
	// when two members' key-value states differ at the same revision.
	ErrHashMismatch = errors.New("etcdfault: HashKV differs between members")
)

// Member is one member of the cluster, as MemberList reports it.
type Member struct {
	ID         uint64
	Name       string // empty for a member added but not yet started
	PeerURLs   []string
	ClientURLs []string
	Learner    bool
}

// Members lists the cluster's members (a linearizable MemberList through
// cli), sorted by name, then ID.
func Members(ctx context.Context, cli *clientv3.Client) ([]Member, error) {
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcdfault: member list: %w", err)
	}
	out := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		out = append(out, Member{
			ID: m.ID, Name: m.Name, Learner: m.IsLearner,
			PeerURLs: slices.Clone(m.PeerURLs), ClientURLs: slices.Clone(m.ClientURLs),
		})
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}

// newClient is a client of endpoints that logs nothing; it does not wait for
// a connection.
func newClient(endpoints ...string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcdfault: client %v: %w", endpoints, err)
	}
	return cli, nil
}

// status is one endpoint's answer to Status.
type status struct {
	endpoint string
	resp     *clientv3.StatusResponse
	err      error
}

// statuses asks every endpoint's Status concurrently, each bounded by
// ProbeTimeout; the answers are in the order of endpoints.
func statuses(ctx context.Context, cli *clientv3.Client, endpoints []string) []status {
	out := make([]status, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
			defer cancel()
			resp, err := cli.Status(pctx, ep)
			out[i] = status{endpoint: ep, resp: resp, err: err}
		})
	}
	wg.Wait()
	return out
}

// leaderOf picks, among the answers, the member that answers as the leader
// (its own id is the leader it reports); of two (a deposed leader that does
// not know it yet), the one of the higher term.
func leaderOf(sts []status) (id uint64, endpoint string, err error) {
	var best *status
	var notes []string
	for i := range sts {
		s := &sts[i]
		switch {
		case s.err != nil:
			notes = append(notes, fmt.Sprintf("%s: %v", s.endpoint, s.err))
		case s.resp.Leader == 0:
			notes = append(notes, fmt.Sprintf("%s: no leader", s.endpoint))
		case s.resp.Header.MemberId != s.resp.Leader:
			notes = append(notes, fmt.Sprintf("%s: follower of %x (term %d)", s.endpoint, s.resp.Leader, s.resp.RaftTerm))
		case best == nil || s.resp.RaftTerm > best.resp.RaftTerm:
			best = s
		}
	}
	if best == nil {
		return 0, "", fmt.Errorf("%w: %s", ErrNoLeader, strings.Join(notes, "; "))
	}
	return best.resp.Leader, best.endpoint, nil
}

// Leader asks each endpoint's Status and returns the leader's member id and
// the endpoint through which it answered as the leader.
func Leader(ctx context.Context, endpoints []string) (memberID uint64, endpoint string, err error) {
	if len(endpoints) == 0 {
		return 0, "", errors.New("etcdfault: Leader: no endpoints")
	}
	cli, err := newClient(endpoints...)
	if err != nil {
		return 0, "", err
	}
	defer cli.Close()
	return leaderOf(statuses(ctx, cli, endpoints))
}

// MoveLeader moves the leadership to the member to (0: a random voting member
// other than the leader) and returns the leader before and after. The request
// is sent to the leader's endpoint, which must be among endpoints; etcd
// answers once the transfer is done. A leader that changed in between is
// looked up again (up to 3 times). Moving it to the current leader does
// nothing and returns (leader, leader, nil).
func MoveLeader(ctx context.Context, endpoints []string, to uint64) (from, newLeader uint64, err error) {
	for attempt := 1; ; attempt++ {
		from, newLeader, err = moveLeader(ctx, endpoints, to)
		if !errors.Is(err, rpctypes.ErrNotLeader) || attempt == 3 || ctx.Err() != nil {
			return from, newLeader, err
		}
	}
}

func moveLeader(ctx context.Context, endpoints []string, to uint64) (uint64, uint64, error) {
	lead, ep, err := Leader(ctx, endpoints)
	if err != nil {
		return 0, 0, err
	}
	cli, err := newClient(ep) // MoveLeader must reach the leader itself
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	members, err := Members(mctx, cli)
	cancel()
	if err != nil {
		return lead, 0, err
	}
	var voters []uint64
	for _, m := range members {
		if !m.Learner {
			voters = append(voters, m.ID)
		}
	}
	switch {
	case to == 0:
		others := slices.DeleteFunc(slices.Clone(voters), func(id uint64) bool { return id == lead })
		if len(others) == 0 {
			return lead, 0, fmt.Errorf("%w: no member but the leader %x to move to", ErrNotMember, lead)
		}
		to = others[rand.IntN(len(others))]
	case !slices.Contains(voters, to):
		return lead, 0, fmt.Errorf("%w: %x (voters: %x)", ErrNotMember, to, voters)
	case to == lead:
		return lead, lead, nil
	}
	if _, err := cli.MoveLeader(ctx, to); err != nil {
		return lead, 0, fmt.Errorf("etcdfault: move leader %x → %x through %s: %w", lead, to, ep, err)
	}
	return lead, to, nil
}

// MemberHash is one member's HashKV answer.
type MemberHash struct {
	Endpoint        string
	MemberID        uint64
	Name            string
	Hash            uint32
	CompactRevision int64
}

func (m MemberHash) String() string {
	name := m.Name
	if name == "" {
		name = "?"
	}
	return fmt.Sprintf("%s (%x, %s)", name, m.MemberID, m.Endpoint)
}

// HashMismatchError says which members' key-value states differ at Revision:
// Members are all the answers, each group of equal hashes together, the
// largest group first (the others are the members that differ from it).
type HashMismatchError struct {
	Revision int64
	Members  []MemberHash
}

func (e *HashMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "etcdfault: HashKV at revision %d differs between members: ", e.Revision)
	for i, g := range groupByHash(e.Members) {
		if i > 0 {
			b.WriteString(" ≠ ")
		}
		names := make([]string, len(g))
		for j, m := range g {
			names[j] = m.String()
		}
		fmt.Fprintf(&b, "hash %08x on %s", g[0].Hash, strings.Join(names, ", "))
	}
	return b.String()
}

// Differing are the members outside the largest group of equal hashes (of
// two groups of one, the second).
func (e *HashMismatchError) Differing() []MemberHash {
	g := groupByHash(e.Members)
	if len(g) == 0 {
		return nil
	}
	return slices.Concat(g[1:]...)
}

// Is makes errors.Is(err, ErrHashMismatch) true.
func (e *HashMismatchError) Is(target error) bool { return target == ErrHashMismatch }

// groupByHash splits hashes into groups of equal Hash, in the order of their
// first member.
func groupByHash(hashes []MemberHash) [][]MemberHash {
	var out [][]MemberHash
	for _, m := range hashes {
		i := slices.IndexFunc(out, func(g []MemberHash) bool { return g[0].Hash == m.Hash })
		if i < 0 {
			out = append(out, nil)
			i = len(out) - 1
		}
		out[i] = append(out[i], m)
	}
	return out
}

// HashKVEqual checks that every endpoint's member has the same key-value
// state at revision rev (etcd's end-of-test check): HashKV at rev on each,
// all equal. rev ≤ 0 means the cluster's current revision, read by a
// linearizable Get. A member behind rev is waited for (until ctx is done), as
// is a compaction not yet applied by every member (hashes are comparable only
// at the same compact revision). The error is a *HashMismatchError naming the
// members that differ, or says which endpoint could not answer.
func HashKVEqual(ctx context.Context, endpoints []string, rev int64) error {
	if len(endpoints) == 0 {
		return errors.New("etcdfault: HashKVEqual: no endpoints")
	}
	cli, err := newClient(endpoints...)
	if err != nil {
		return err
	}
	defer cli.Close()
	for rev <= 0 {
		// Asked again until ctx ends: one slow answer (a machine busy
		// checking a history) is no difference between members.
		gctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
		resp, err := cli.Get(gctx, "etcdfault-revision", clientv3.WithCountOnly())
		cancel()
		switch {
		case err == nil:
			rev = resp.Header.Revision
		case ctx.Err() != nil:
			return fmt.Errorf("etcdfault: current revision: %w", err)
		default:
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
	names := map[uint64]string{}
	mctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	if ms, err := Members(mctx, cli); err == nil {
		for _, m := range ms {
			names[m.ID] = m.Name
		}
	}
	cancel()
	for {
		hashes, err := hashKVs(ctx, cli, endpoints, rev, names)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(hashes, func(h MemberHash) bool { return h.CompactRevision != hashes[0].CompactRevision }) {
			// A compaction applied by some members only: wait for the rest.
			select {
			case <-ctx.Done():
				return fmt.Errorf("etcdfault: HashKV at revision %d: compact revisions still differ (%v): %w", rev, hashes, ctx.Err())
			case <-time.After(pollInterval):
				continue
			}
		}
		groups := groupByHash(hashes)
		if len(groups) == 1 {
			return nil
		}
		slices.SortStableFunc(groups, func(a, b []MemberHash) int { return cmp.Compare(len(b), len(a)) })
		e := &HashMismatchError{Revision: rev, Members: slices.Concat(groups...)}
		nameMembers(ctx, e.Members)
		return e
	}
}

// nameMembers fills in the names the cluster-wide member list lacked (the
// endpoints may not all be of one cluster: that is what a mismatch may mean),
// asking each such endpoint for its own member list; best effort.
func nameMembers(ctx context.Context, hs []MemberHash) {
	for i := range hs {
		if hs[i].Name != "" {
			continue
		}
		cli, err := newClient(hs[i].Endpoint)
		if err != nil {
			continue
		}
		mctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
		ms, err := Members(mctx, cli)
		cancel()
		cli.Close()
		if err != nil {
			continue
		}
		for _, m := range ms {
			if m.ID == hs[i].MemberID {
				hs[i].Name = m.Name
			}
		}
	}
}

// hashKVs asks every endpoint's HashKV at rev, concurrently, waiting for a
// member whose store is behind rev.
func hashKVs(ctx context.Context, cli *clientv3.Client, endpoints []string, rev int64, names map[uint64]string) ([]MemberHash, error) {
	out := make([]MemberHash, len(endpoints))
	errs := make([]error, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			for {
				pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
				resp, err := cli.HashKV(pctx, ep, rev)
				cancel()
				if err == nil {
					out[i] = MemberHash{
						Endpoint: ep, MemberID: resp.Header.MemberId, Name: names[resp.Header.MemberId],
						Hash: resp.Hash, CompactRevision: resp.CompactRevision,
					}
					return
				}
				if !errors.Is(err, rpctypes.ErrFutureRev) {
					errs[i] = fmt.Errorf("etcdfault: HashKV at revision %d on %s: %w", rev, ep, err)
					return
				}
				select {
				case <-ctx.Done():
					errs[i] = fmt.Errorf("etcdfault: HashKV on %s: still behind revision %d: %w", ep, rev, ctx.Err())
					return
				case <-time.After(pollInterval):
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Healthy checks once that the cluster is healthy as seen through endpoints
// (see the package doc) and says why not.
func Healthy(ctx context.Context, endpoints []string) error {
	clis, closeAll, err := endpointClients("Healthy", endpoints)
	if err != nil {
		return err
	}
	defer closeAll()
	return healthy(ctx, endpoints, clis)
}

// WaitHealthy waits until Healthy holds for endpoints (polled every 50 ms),
// or ctx is done: then the error says what was still wrong.
func WaitHealthy(ctx context.Context, endpoints []string) error {
	clis, closeAll, err := endpointClients("WaitHealthy", endpoints)
	if err != nil {
		return err
	}
	defer closeAll()
	for {
		err := healthy(ctx, endpoints, clis)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// endpointClients returns one client per endpoint, reaching only that
// endpoint, and the function that closes them all.
func endpointClients(caller string, endpoints []string) ([]*clientv3.Client, func(), error) {
	if len(endpoints) == 0 {
		return nil, nil, fmt.Errorf("etcdfault: %s: no endpoints", caller)
	}
	var clis []*clientv3.Client
	closeAll := func() {
		for _, c := range clis {
			c.Close()
		}
	}
	for _, ep := range endpoints {
		c, err := newClient(ep)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clis = append(clis, c)
	}
	return clis, closeAll, nil
}

// healthy is Healthy with one client per endpoint (clis[i] reaches only
// endpoints[i]).
func healthy(ctx context.Context, endpoints []string, clis []*clientv3.Client) error {
	errs := make([]error, len(endpoints))
	leaders := make([]uint64, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
			defer cancel()
			st, err := clis[i].Status(pctx, ep)
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("%s: status: %w", ep, err)
				return
			case st.Leader == 0 || len(st.Errors) > 0:
				errs[i] = fmt.Errorf("%s: leader %x, errors %q", ep, st.Leader, st.Errors)
				return
			}
			leaders[i] = st.Leader
			if _, err := clis[i].Get(pctx, "etcdfault-health", clientv3.WithCountOnly()); err != nil {
				errs[i] = fmt.Errorf("%s: linearizable read: %w", ep, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("etcdfault: not healthy: %w", err)
	}
	for i := range leaders {
		if leaders[i] != leaders[0] {
			return fmt.Errorf("etcdfault: not healthy: %s names leader %x, %s names %x", endpoints[0], leaders[0], endpoints[i], leaders[i])
		}
	}
	return nil
}
