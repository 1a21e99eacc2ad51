package hosted

import (
	"fmt"
	"runtime/debug"

	"github.com/meshloc/meshloc/pkg/actor"
)

// A panic in an object's code (its handler, a timer, an answer to one of
// its messages, its snapshot or restore) is that call's error
// (actor.ErrPanicked), never the node's end: one object's bug must not
// take down every object the node hosts. It is logged with its stack at
// error level and counted (meshloc_object_panics_total). What a panicking
// turn sent or pushed is dropped; a memory object keeps the state the
// handler left (there is no other copy), a durable one is dropped and
// re-activated from etcd by its next call, so its panicked request changed
// nothing.

// panicked logs and counts panic p of obj's code in what, and returns it
// as an error.
func (n *Env) panicked(obj, what string, p any) error {
	n.metrics.Panics.Inc()
	n.log.Error().Str("object", obj).Str("in", what).Str("panic", fmt.Sprint(p)).Bytes("stack", debug.Stack()).
		Msg("object code panicked: answered as an internal error, the node goes on")
	return fmt.Errorf("%w: %s of %s: %v", actor.ErrPanicked, what, obj, p)
}

// handle runs the object's handler for one request.
func (h *Object) handle(hc *handlerCtx, method string, args [][]byte) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			hc.sends, hc.pushes = nil, nil
			out, err = nil, h.env.panicked(h.name, "Handle("+method+")", p)
		}
	}()
	return h.Inst.Handle(hc, method, args)
}

// Guard runs f, a call into h's code other than a request's handler.
func (h *Object) Guard(what string, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = h.env.panicked(h.name, what, p)
		}
	}()
	return f()
}
