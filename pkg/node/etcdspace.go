package node

// The node and etcd's space. etcd at its quota raises the NOSPACE alarm and
// refuses every write: no object can be activated, recovered or moved,
// while the objects hosted here still serve. The node follows the alarm
// (internal/etcdalarm: etcd's alarm list every alarmEvery, at once after a
// write met NOSPACE), says so on /readyz and in meshloc_etcd_alarm, and
// answers an activation etcd refused with resource_exhausted at once,
// instead of unavailable, which callers retry until their deadline.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshloc/meshloc/internal/etcdalarm"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node/nodemetrics"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// alarmEvery is how often the node reads etcd's alarm list.
const alarmEvery = 5 * time.Second

// followAlarms starts the alarm monitor (until ctx ends) and its metric.
func (n *Node) followAlarms(ctx context.Context) {
	g := nodemetrics.EtcdAlarms(n.metrics.Reg, etcdalarm.Types)
	n.alarms = etcdalarm.New(n.etcd, alarmEvery, n.log, func(as []etcdalarm.Alarm) {
		for _, t := range etcdalarm.Types {
			v := 0.0
			if etcdalarm.Has(as, t) {
				v = 1
			}
			g.WithLabelValues(t).Set(v)
		}
	})
	n.spawnBG(func() { n.alarms.Run(ctx) })
}

// Ready says why the node should get no new work, or nil: it is not
// serving yet or any more, its lease is not valid, or etcd refuses writes
// (its NOSPACE alarm). It is what /readyz answers.
func (n *Node) Ready() error {
	if why := n.notReady(); why != "" {
		return fmt.Errorf("%w: %s", ErrNotReady, why)
	}
	return nil
}

// ErrNotReady: the node should get no new work now (Ready says why).
var ErrNotReady = errors.New("node: not ready")

func (n *Node) notReady() string {
	select {
	case <-n.Fenced():
		return "fenced: the lease ended"
	default:
	}
	switch {
	case n.isClosing():
		return "stopping"
	case n.draining.Load():
		return "draining"
	case !n.serving.Load():
		return "starting"
	}
	if st := n.keeper.Status(n.now()); st != lease.Valid {
		return "lease " + st.String()
	}
	if n.alarms != nil && n.alarms.NoSpace() {
		return "etcd NOSPACE alarm: etcd is out of space and refuses every write (no object can be created or moved); " + etcdalarm.NoSpaceHint
	}
	return ""
}

// readyz answers 200 "ok" when notReady says nothing, 503 with why.
func (n *Node) readyz(w http.ResponseWriter, _ *http.Request) {
	if why := n.notReady(); why != "" {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// storeReply is the answer to a call whose activation met err from etcd:
// resource_exhausted for NOSPACE (nothing will be written until the alarm
// is disarmed: the caller must not wait), corrupt_record for a record that
// does not decode (retrying does not help), unavailable otherwise.
func (n *Node) storeReply(what string, err error) *pb.CallReply {
	if authority.IsNoSpace(err) {
		return n.noSpaceReply(what + ": " + err.Error())
	}
	if errors.Is(err, authority.ErrCorruptRecord) {
		return &pb.CallReply{Code: pb.Code_CODE_CORRUPT_RECORD, Message: what + ": " + err.Error()}
	}
	return unavailable(what, err)
}

// noSpaceReply answers resource_exhausted with msg, and has the alarm read
// again now.
func (n *Node) noSpaceReply(msg string) *pb.CallReply {
	if n.alarms != nil {
		n.alarms.Kick()
	}
	return &pb.CallReply{Code: pb.Code_CODE_RESOURCE_EXHAUSTED, Message: msg + "; " + etcdalarm.NoSpaceHint}
}
