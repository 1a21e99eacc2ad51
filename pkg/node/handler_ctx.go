package node

import (
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
)

// handlerCtx is the actor.Context of one turn of a hosted object's mailbox
// (a request, a timer tick, an OnReply): what its handler may use. Send and
// Ask are in messages.go.
type handlerCtx struct {
	h       *hosted
	now     time.Time
	session *boundSession // the calling session (nil: none)
	pushes  []pendingPush // recorded with the call (commitPushes)
	// op is the turn's operation id, the parent of the ids of the
	// messages it sends (sends, recorded with the turn: messages.go).
	op    wire.OperationID
	sends []actor.OutMessage
}

func (c *handlerCtx) Push(payload []byte) error {
	if c.session == nil {
		return actor.ErrNoSession
	}
	if len(payload) > session.MaxPushBytes {
		return actor.InvalidArgument("a push of %d bytes (at most %d)", len(payload), session.MaxPushBytes)
	}
	c.pushes = append(c.pushes, pendingPush{to: c.session, payload: payload})
	return nil
}

func (c *handlerCtx) Publish(payload []byte) error {
	if len(payload) > session.MaxPushBytes {
		return actor.InvalidArgument("a push of %d bytes (at most %d)", len(payload), session.MaxPushBytes)
	}
	c.pushes = append(c.pushes, pendingPush{payload: payload})
	return nil
}

func (c *handlerCtx) Object() keyspace.Object { return c.h.obj }
func (c *handlerCtx) Now() time.Time          { return c.now }
func (c *handlerCtx) Fence() actor.Fence {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	f := c.h.fence
	return actor.Fence{OwnerID: f.Owner.ID, OwnerGeneration: f.Owner.Generation, ObjectGeneration: f.ObjectGeneration, AuthorityGeneration: f.AuthorityGeneration}
}

func (c *handlerCtx) SetTimer(spec actor.TimerSpec) error {
	if _, ok := c.h.inst.(actor.TimerObject); !ok {
		return fmt.Errorf("%w: type %s does not implement OnTimer", actor.ErrInvalidTimer, c.h.typ.Name)
	}
	c.h.mu.Lock()
	if c.h.timers == nil {
		c.h.timers = actor.NewTimers()
	}
	err := c.h.timers.Set(spec, c.now)
	c.h.mu.Unlock()
	if err == nil {
		c.h.arm()
	}
	return err
}

func (c *handlerCtx) CancelTimer(name string) bool {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return c.h.timers != nil && c.h.timers.Cancel(name)
}
