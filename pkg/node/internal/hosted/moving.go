package hosted

// Moving holds what an object's mailbox keeps only while it is relocated:
// the requests a source captured, kept at its boundary or held, those a
// target keeps before admission, and the channels a seal and an admission
// wait on. Most objects are idle and not moving, so hosted keeps a pointer
// (nil) instead of these 112 bytes; tidyLocked drops it when it empties.
type Moving struct {
	SealWait chan struct{} // closed by drain when it stopped for a seal
	Captured []*Work       // source: queue captured at the seal; target: the source's
	Boundary []*Work       // source: arrived after the seal, before CUTOVER
	Held     []*Work       // source: arrived after CUTOVER
	Waiting  []*Work       // target: arrived before admission
	// unhidden, for an instance a target restored: closed when it is
	// admitted or closed (nil otherwise).
	Unhidden chan struct{}
}

// sealing reports whether a seal waits for the handler in progress (m may
// be nil).
func (m *Moving) sealing() bool { return m != nil && m.SealWait != nil }

// moving returns h's relocation lists, made on first use (h.Mu held).
func (h *Object) MovingLocked() *Moving {
	if h.Mv == nil {
		h.Mv = &Moving{}
	}
	return h.Mv
}

// TidyLocked drops h's relocation lists once nothing is in them (h.Mu held).
func (h *Object) TidyLocked() {
	if m := h.Mv; m != nil && m.SealWait == nil && m.Unhidden == nil &&
		len(m.Captured) == 0 && len(m.Boundary) == 0 && len(m.Held) == 0 && len(m.Waiting) == 0 {
		h.Mv = nil
	}
}
