package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// A reader of server-sent events (text/event-stream), as much of the
// format as a stream of locationd's needs and a hostile server cannot
// abuse: every line and every event is bounded, a field it does not know is
// skipped. Lines end with LF or CRLF (a lone CR does not end a line).

// MaxEventBytes bounds one event of GET /v1/events (its data lines, joined)
// and one line of the stream; a larger one ends Events with an error
// instead of growing the client's memory.
const MaxEventBytes = 1 << 20

// errEventTooLarge: a line or an event is over MaxEventBytes.
var errEventTooLarge = fmt.Errorf("an event or line of the stream is over %d bytes", MaxEventBytes)

// sseReader reads events one at a time.
type sseReader struct {
	r *bufio.Reader
	// lastID is the id of the last event dispatched with one (the SSE
	// "last event ID buffer": an event without an id keeps it).
	lastID string
	// retry is the reconnection delay the server asked for (0: none yet).
	retry time.Duration
	line  []byte
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// readLine returns the next line without its end; io.EOF at the end of the
// stream (a last line without an end is dropped, as an unfinished event is).
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(s.line)+len(frag) > MaxEventBytes+2 {
			return nil, errEventTooLarge
		}
		s.line = append(s.line, frag...)
		switch {
		case err == nil:
			l := s.line[:len(s.line)-1]
			return bytes.TrimSuffix(l, []byte{'\r'}), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}

// next returns the next event (its ID is the last event ID, which an
// event without an id field inherits), or the error that ended the stream.
func (s *sseReader) next() (Event, error) {
	var ev Event
	var data []byte
	haveData := false
	for {
		line, err := s.readLine()
		if err != nil {
			return Event{}, err
		}
		if len(line) == 0 { // dispatch
			if !haveData {
				ev = Event{}
				continue
			}
			if ev.Type == "" {
				ev.Type = "message"
			}
			ev.ID, ev.Data = s.lastID, data
			return ev, nil
		}
		if line[0] == ':' {
			continue // a comment
		}
		name, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(name) {
		case "event":
			ev.Type = string(value)
		case "data":
			if len(data)+len(value)+1 > MaxEventBytes {
				return Event{}, errEventTooLarge
			}
			if haveData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			haveData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				s.lastID = string(value)
			}
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 32); err == nil && allDigits(value) {
				s.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}
