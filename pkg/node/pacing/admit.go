package pacing

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Admit is a relocation target's part for a background stream: a source
// that waits is admitted by p (at most bound; its source gives up
// sooner), one that does not is booked; then the headers answer the
// node's rate (rate, read once admitted). A stream without a claim, or a
// node whose pacing is off, is not touched. An error ends the stream
// before anything was received.
func (p *Pacing) Admit(stream grpc.ServerStream, bound time.Duration, rate func() float64) error {
	units, wait, ok := BackgroundOf(stream.Context())
	if !ok || !p.Enabled() {
		return nil
	}
	if !wait {
		// The headers go with the first answer: no frame of their own.
		p.Book(units)
		_ = stream.SetHeader(RateHeader(rate()))
		return nil
	}
	if _, err := p.Wait(stream.Context(), units, bound); err != nil {
		return status.Error(codes.ResourceExhausted, "background relocation deferred: this node's calls are slow")
	}
	_ = stream.SendHeader(RateHeader(rate())) // the source waits for them
	return nil
}
