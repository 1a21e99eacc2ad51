package lease

import (
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/failpoint"
)

// The local deadline must never lie past etcd's expiry of the lease (doc.go,
// "Why the deadline is safe"). A keep-alive sent at s reaches etcd at s+up,
// which renews the lease to s+up+TTL; its reply is processed at s+up+down.
// Counting from the send, the deadline s+TTL−Margin is before that expiry
// whatever the delays. The planted bug lease-receive-time counts from the
// reply's arrival: s+up+down+TTL−Margin, past the expiry as soon as the reply
// was delayed by more than the margin (TTL 5s and Margin 1s as in the
// timelines of status_test.go).
func TestDeadlineNeverPastExpiry(t *testing.T) {
	const sent = 1000 * time.Millisecond
	delays := []time.Duration{0, ms(10), ms(400), ms(999), ms(1000), ms(1001), ms(1500), ms(2500)}
	// pastExpiry returns, for every (up, down), how far the deadline lies past
	// the server-side expiry (≤ 0: safe).
	run := func(t *testing.T) map[[2]time.Duration]time.Duration {
		out := map[[2]time.Duration]time.Duration{}
		for _, up := range delays {
			for _, down := range delays {
				if up+down >= 2900*time.Millisecond {
					continue // the reply would arrive after the grant's deadline: no confirmation at all
				}
				s := newState("n1", 0x1, tlMargin, t0, tlTTL)
				now := t0.Add(sent + up + down)
				if _, fenced := s.confirm(t0.Add(sent), tlTTL, now); fenced != nil {
					t.Fatalf("up %s down %s: fenced: %v", up, down, fenced)
				}
				if got := Evaluate(s.input(), now); got != Valid {
					t.Fatalf("up %s down %s: status %s right after the confirmation", up, down, got)
				}
				expiry := t0.Add(sent + up + tlTTL)
				out[[2]time.Duration{up, down}] = s.deadline.Sub(expiry)
			}
		}
		return out
	}
	t.Run("correct", func(t *testing.T) {
		for d, past := range run(t) {
			if past > -tlMargin {
				t.Errorf("sent at %s, up %s, down %s: deadline %s past etcd's expiry, want at least the margin before it", sent, d[0], d[1], past)
			}
		}
	})
	t.Run("planted", func(t *testing.T) {
		if !failpoint.Enabled {
			t.Skip("planting needs -tags failpoints")
		}
		defer failpoint.Plant(failpoint.BugLeaseReceiveTime)()
		exposed := 0
		for d, past := range run(t) {
			up, down := d[0], d[1]
			if want := down - tlMargin; past != want {
				t.Errorf("up %s, down %s: deadline %s past the expiry, want %s (receive time + TTL − margin)", up, down, past, want)
			}
			if down > tlMargin {
				exposed++
				if past <= 0 {
					t.Errorf("up %s, down %s: the reply was delayed more than the margin, yet the deadline is before the expiry", up, down)
				}
			}
		}
		if exposed == 0 {
			t.Fatal("no delay above the margin was tried")
		}
	})
}
