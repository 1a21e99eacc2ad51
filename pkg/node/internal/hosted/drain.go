package hosted

import (
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/drain"
)

// What a drain sees of an object (the node hands objects to pkg/node/drain
// as its drain.Hosted).

// Name is h's object name; Object its parsed name.
func (h *Object) Name() string            { return h.name }
func (h *Object) Object() keyspace.Object { return h.obj }

// StateBytes is h's state size as far as the node knows it.
func (h *Object) StateBytes() int { return h.KnownStateBytes() }

// Verdict says whether a drain may take h now.
func (h *Object) Verdict() drain.Verdict {
	select {
	case <-h.ReadyCh():
	default:
		return drain.Later // activating
	}
	if h.FailReply != nil {
		return drain.Gone
	}
	h.Mu.Lock()
	defer h.Mu.Unlock()
	switch {
	case h.Closed:
		return drain.Gone
	case h.Mode != ModeServing || h.Relocating:
		return drain.Later
	}
	return drain.Now
}
