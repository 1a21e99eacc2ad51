package node

// moving holds what an object's mailbox keeps only while it is relocated:
// the requests a source captured, kept at its boundary or held, those a
// target keeps before admission, and the channels a seal and an admission
// wait on. Most objects are idle and not moving, so hosted keeps a pointer
// (nil) instead of these 112 bytes; tidyLocked drops it when it empties.
type moving struct {
	sealWait chan struct{} // closed by drain when it stopped for a seal
	captured []*work       // source: queue captured at the seal; target: the source's
	boundary []*work       // source: arrived after the seal, before CUTOVER
	held     []*work       // source: arrived after CUTOVER
	waiting  []*work       // target: arrived before admission
	// unhidden, for an instance a target restored: closed when it is
	// admitted or closed (nil otherwise).
	unhidden chan struct{}
}

// sealing reports whether a seal waits for the handler in progress (m may
// be nil).
func (m *moving) sealing() bool { return m != nil && m.sealWait != nil }

// moving returns h's relocation lists, made on first use (h.mu held).
func (h *hosted) moving() *moving {
	if h.mv == nil {
		h.mv = &moving{}
	}
	return h.mv
}

// tidyLocked drops h's relocation lists once nothing is in them (h.mu held).
func (h *hosted) tidyLocked() {
	if m := h.mv; m != nil && m.sealWait == nil && m.unhidden == nil &&
		len(m.captured) == 0 && len(m.boundary) == 0 && len(m.held) == 0 && len(m.waiting) == 0 {
		h.mv = nil
	}
}
