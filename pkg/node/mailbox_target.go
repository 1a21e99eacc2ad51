package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/node/routing"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// targetMailbox is what one target stage restores, then admits or
// discards (the relocator's TargetMailbox).
type targetMailbox struct {
	n      *Node
	m      *relocation.Target // its PREPARE and id
	hidden []*hosted.Object
	// release undoes what the stage holds until it ends (an Actor Join's
	// lock on its group).
	release []func()
	// bulk: the stage is one relocation of a bulk move (bulk_target.go).
	bulk bool
}

// close releases what the stage held; the node calls it when the stage
// ended.
func (t *targetMailbox) close() {
	for _, f := range t.release {
		f()
	}
	t.release = nil
}

// Restore decodes the envelope and creates hidden instances: registered,
// so requests for them wait, but admitting nothing until the commit.
func (t *targetMailbox) Restore(payload []byte) error {
	n := t.n
	env, states, err := relocation.DecodePayload(payload)
	if err != nil {
		return err
	}
	if env.GetVersion() != wire.Version || len(env.GetParticipants()) == 0 {
		return fmt.Errorf("%w: envelope version %d with %d participants", relocation.ErrProtocol, env.GetVersion(), len(env.GetParticipants()))
	}
	if err := t.checkEnvelope(env); err != nil {
		return err
	}
	var made []*hosted.Object
	undo := func() { n.discard(made) }
	for i, ps := range env.GetParticipants() {
		obj, err := keyspace.ParseObject(ps.GetParticipant().GetObject())
		if err != nil {
			undo()
			return fmt.Errorf("%w: %v", relocation.ErrProtocol, err)
		}
		if obj.Kind == keyspace.KindGroup {
			continue // a group has no instance: its members are the next participants
		}
		h, err := n.restoreHidden(obj, ps, states[i], env.GetRelocationId())
		if err == nil {
			err = n.placeRestored(h)
		}
		if err != nil {
			undo()
			return err
		}
		made = append(made, h)
	}
	t.hidden = made
	return nil
}

// restoreHidden makes the hidden instance of one participant.
func (n *Node) restoreHidden(obj keyspace.Object, ps *pb.ParticipantState, state, relocationID []byte) (*hosted.Object, error) {
	typ, err := n.reg.Lookup(obj.Type)
	if err != nil || !n.hosts[obj.Type] {
		return nil, fmt.Errorf("%w: this node does not host type %s", relocation.ErrProtocol, obj.Type)
	}
	return hosted.Restore(n.env, obj, n.typeRef(typ), ps, state, relocationID)
}

// placeRestoredWait bounds how long a restored object waits for this
// node's departing copy of it to go.
const placeRestoredWait = 2 * time.Second

// placeRestored registers a restored hidden instance. The object may still
// be here as the sealed source copy of the relocation that just moved it
// away (an Actor Join answers at READY, so a group move can follow at
// once): that copy goes once its source settles, which this waits for (a
// change of the hosted objects wakes it), up to placeRestoredWait. Any other copy present is a
// protocol error.
func (n *Node) placeRestored(h *hosted.Object) error {
	var timeout <-chan time.Time
	for {
		n.mu.Lock()
		cur, ok := n.objects[h.Name()]
		if !ok || cur == nil {
			n.objects[h.Name()] = h
			n.noteChangeLocked()
			n.mu.Unlock()
			return nil
		}
		changed := n.changes.Wait()
		n.mu.Unlock()
		cur.Mu.Lock()
		departing := cur.Mode == hosted.ModeBoundary || cur.Mode == hosted.ModeHold
		cur.Mu.Unlock()
		if !departing {
			return fmt.Errorf("%w: %s is already present on this node", relocation.ErrProtocol, h.Name())
		}
		if timeout == nil {
			t := n.clock.NewTimer(placeRestoredWait)
			defer t.Stop()
			timeout = t.C()
		}
		select {
		case <-changed:
		case <-timeout:
			return fmt.Errorf("%w: %s is already present on this node (its departing copy stayed %s)", relocation.ErrProtocol, h.Name(), placeRestoredWait)
		case <-n.stopping:
			return fmt.Errorf("%w: %s is already present on this node", relocation.ErrProtocol, h.Name())
		}
	}
}

// Admit opens the hidden instances under their committed records.
func (t *targetMailbox) Admit(a relocation.Admit) {
	id := t.m.ID()
	// Every committed record, the group's too (a group move, an Actor
	// Join): the next relocation from here plans from the cache.
	for _, snap := range a.Committed {
		t.n.cache.Observe(snap)
	}
	for _, h := range t.hidden {
		if snap, ok := a.Committed[h.Name()]; ok {
			h.Admit(snap, a.Data, id)
			h.RouteSessions(id[:], true) // the sessions are bound here now
		}
	}
	t.hidden = nil
}

func (t *targetMailbox) Discard() {
	t.n.discard(t.hidden)
	t.hidden = nil
}

// discard drops hidden instances; requests that waited for them are
// redirected.
func (n *Node) discard(hs []*hosted.Object) {
	for _, h := range hs {
		n.forget(h)
		h.Close()
	}
}

// checkEnvelope checks, before anything is staged, that the envelope
// carries exactly PREPARE's participants in order, and admits an Actor
// Join: the group must be this node's, active and not full, and is locked
// for this stage until it ends.
func (t *targetMailbox) checkEnvelope(env *pb.Envelope) error {
	p := t.m.Prepare()
	if len(env.GetParticipants()) != len(p.GetParticipants()) {
		return fmt.Errorf("%w: the payload carries %d participants, PREPARE %d", relocation.ErrProtocol, len(env.GetParticipants()), len(p.GetParticipants()))
	}
	for i, ps := range env.GetParticipants() {
		if got, want := ps.GetParticipant().GetObject(), p.GetParticipants()[i].GetObject(); got != want {
			return fmt.Errorf("%w: payload participant %d is %q, PREPARE's %q", relocation.ErrProtocol, i, got, want)
		}
		if k := routing.SplitKind(ps.GetParticipant().GetObject()); k == keyspace.KindGroup && (ps.GetStateLength() != 0 || len(ps.GetQueued()) != 0) {
			return fmt.Errorf("%w: group participant %s carries state", relocation.ErrProtocol, ps.GetParticipant().GetObject())
		}
	}
	if j := p.GetJoinGroup(); j != "" {
		return t.admitJoin(j, p.GetParticipants()[0].GetObject())
	}
	return nil
}

func (t *targetMailbox) admitJoin(group, actor string) error {
	n := t.n
	g, err := keyspace.ParseObject(group)
	if err != nil {
		return fmt.Errorf("%w: %v", relocation.ErrProtocol, err)
	}
	release, err := n.lockGroup(group, "Actor Join of "+actor)
	if err != nil {
		return &relocation.RefusedError{Code: pb.Code_CODE_RELOCATING, Message: err.Error()}
	}
	ctx, cancel := context.WithTimeout(n.life, 5*time.Second)
	defer cancel()
	gs, err := n.store.Read(ctx, g)
	switch {
	case errors.Is(err, authority.ErrNotFound):
		release()
		return &relocation.RefusedError{Code: pb.Code_CODE_NOT_FOUND, Message: group + " does not exist"}
	case err != nil:
		release()
		return &relocation.RefusedError{Code: pb.Code_CODE_UNAVAILABLE, Message: "read " + group + ": " + err.Error()}
	case gs.Record.Owner != n.self || gs.Record.State != record.StateActive:
		release()
		return &relocation.RefusedError{Code: pb.Code_CODE_STALE_FENCE, Message: fmt.Sprintf("%s is owned by %s (%s), not by %s", group, gs.Record.Owner, gs.Record.State, n.self)}
	}
	if err := n.limits().CheckGroup(n.keys, group, len(gs.Record.Members)+1, nil); err != nil {
		release()
		return &relocation.RefusedError{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: err.Error()}
	}
	t.release = append(t.release, release)
	return nil
}
