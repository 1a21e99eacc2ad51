package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// waitReady waits (a minute at most: the node reads etcd's alarms every
// few seconds) until the node's readiness is ready (or not), and returns
// its error.
func waitReady(t *testing.T, n *node.Node, ready bool) error {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := n.Ready()
		if (err == nil) == ready {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready() = %v after a minute, want ready %v", err, ready)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// While etcd's NOSPACE alarm is on: a relocation aborts saying etcd is out
// of space, an activation and a durable object's change fail at once with
// resource_exhausted (the caller's deadline is a minute: it is not what
// ended the call), the memory objects hosted go on serving, and the node's
// /readyz and meshloc_etcd_alarm say so. Once the alarm is disarmed, all of it works
// again.
func TestNoSpaceAlarm(t *testing.T) {
	m := startMesh(t, 2)
	n1 := m.nodes[0]
	c := newClient(t, client.Config{Nodes: []string{n1.Address()}, Timeout: time.Minute})
	ctx := context.Background()
	rep, err := c.Call(ctx, "actor/counter/kept", "add", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, "actor/dcounter/durable", "add", "1"); err != nil {
		t.Fatal(err)
	}
	// The object's owner, and the other node.
	src, dst := m.nodes[0], "n2"
	if rep.Node == "n2" {
		src, dst = m.nodes[1], "n1"
	}
	if err := n1.Ready(); err != nil {
		t.Fatalf("before the alarm: %v", err)
	}

	etcdtest.RaiseNoSpace(t, m.etcd)
	st, err := src.Relocate(ctx, "actor/counter/kept", node.RelocateOptions{Target: dst})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetOutcome() != "aborted" || st.GetCode() != pb.Code_CODE_RESOURCE_EXHAUSTED || !strings.Contains(st.GetMessage(), "etcd is out of space") {
		t.Errorf("relocation under NOSPACE: %s %s %q, want aborted resource_exhausted, etcd is out of space", st.GetOutcome(), st.GetCode(), st.GetMessage())
	}
	_, err = c.Call(ctx, "actor/counter/new", "add", "1")
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != pb.Code_CODE_RESOURCE_EXHAUSTED || !strings.Contains(we.Message, "NOSPACE") {
		t.Errorf("activation under NOSPACE: %v, want resource_exhausted naming NOSPACE (not the call's deadline)", err)
	}
	if _, err := c.Call(ctx, "actor/counter/kept", "add", "1"); err != nil {
		t.Errorf("a hosted object under NOSPACE: %v, want it served", err)
	}
	// A durable object's change cannot be persisted: refused at once too.
	_, err = c.Call(ctx, "actor/dcounter/durable", "add", "1")
	if !errors.As(err, &we) || we.Code != pb.Code_CODE_RESOURCE_EXHAUSTED || !strings.Contains(we.Message, "NOSPACE") {
		t.Errorf("a durable change under NOSPACE: %v, want resource_exhausted naming NOSPACE", err)
	}
	if err := waitReady(t, n1, false); !errors.Is(err, node.ErrNotReady) || !strings.Contains(err.Error(), "NOSPACE") || !strings.Contains(err.Error(), "alarm disarm") {
		t.Errorf("readiness under NOSPACE: %v, want the alarm and what to do", err)
	}
	if v := m.metricWith(t, n1, "meshloc_etcd_alarm", map[string]string{"type": "NOSPACE"}); v != 1 {
		t.Errorf("meshloc_etcd_alarm{type=NOSPACE} = %v under the alarm", v)
	}

	etcdtest.DisarmNoSpace(t, m.etcd)
	waitReady(t, n1, true)
	if v := m.metricWith(t, n1, "meshloc_etcd_alarm", map[string]string{"type": "NOSPACE"}); v != 0 {
		t.Errorf("meshloc_etcd_alarm{type=NOSPACE} = %v after the alarm", v)
	}
	if st, err := src.Relocate(ctx, "actor/counter/kept", node.RelocateOptions{Target: dst}); err != nil || st.GetOutcome() != "completed" {
		t.Errorf("relocation after the alarm: %v %v", st, err)
	}
	if _, err := c.Call(ctx, "actor/counter/new", "add", "1"); err != nil {
		t.Errorf("activation after the alarm: %v", err)
	}
	if rep, err := c.Call(ctx, "actor/dcounter/durable", "add", "1"); err != nil || value(t, rep) != 2 {
		t.Errorf("a durable change after the alarm: %v, %v: want 2 (the refused change not applied)", rep, err)
	}
}
