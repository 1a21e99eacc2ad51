package hosted

import (
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
)

// handlerCtx is the actor.Context of one turn of a hosted object's mailbox
// (a request, a timer tick, an OnReply): what its handler may use. Send and
// Ask are in messages.go.
type handlerCtx struct {
	h       *Object
	now     time.Time
	session *BoundSession // the calling session (nil: none)
	pushes  []pendingPush // recorded with the call (commitPushes)
	// op is the turn's operation id, the parent of the ids of the
	// messages it sends (sends, recorded with the turn: messages.go).
	op    wire.OperationID
	sends []actor.OutMessage
	// del: the turn asked that its object end after it (delete.go).
	del bool
}

func (c *handlerCtx) Push(payload []byte) error {
	if c.session == nil {
		return actor.ErrNoSession
	}
	if len(payload) > session.MaxPushBytes {
		return actor.InvalidArgument("a push of %d bytes (at most %d)", len(payload), session.MaxPushBytes)
	}
	c.pushes = append(c.pushes, pendingPush{to: c.session, payload: payload, trace: tracing.Traceparent(c.h.traced)})
	return nil
}

func (c *handlerCtx) Publish(payload []byte) error {
	if len(payload) > session.MaxPushBytes {
		return actor.InvalidArgument("a push of %d bytes (at most %d)", len(payload), session.MaxPushBytes)
	}
	c.pushes = append(c.pushes, pendingPush{payload: payload, trace: tracing.Traceparent(c.h.traced)})
	return nil
}

func (c *handlerCtx) Object() keyspace.Object { return c.h.obj }
func (c *handlerCtx) Now() time.Time          { return c.now }
func (c *handlerCtx) Fence() actor.Fence {
	c.h.Mu.Lock()
	defer c.h.Mu.Unlock()
	f := c.h.Fence
	return actor.Fence{OwnerID: f.Owner.ID, OwnerGeneration: f.Owner.Generation, ObjectGeneration: f.ObjectGeneration, AuthorityGeneration: f.AuthorityGeneration}
}

func (c *handlerCtx) SetTimer(spec actor.TimerSpec) error {
	if _, ok := c.h.Inst.(actor.TimerObject); !ok {
		return fmt.Errorf("%w: type %s does not implement OnTimer", actor.ErrInvalidTimer, c.h.Typ.Name)
	}
	c.h.Mu.Lock()
	if c.h.Timers == nil {
		c.h.Timers = actor.NewTimers()
	}
	err := c.h.Timers.Set(spec, c.now)
	c.h.Mu.Unlock()
	if err == nil {
		c.h.Arm()
	}
	return err
}

func (c *handlerCtx) CancelTimer(name string) bool {
	c.h.Mu.Lock()
	defer c.h.Mu.Unlock()
	return c.h.Timers != nil && c.h.Timers.Cancel(name)
}
