package transport

import (
	"sync"
	"unsafe"

	"google.golang.org/grpc/mem"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A relocation's STATE chunks are its bulk: a 256 MiB state is 256 frames
// of 1 MiB. Each received frame is made into one buffer (its chunk data
// aliases it, see parseChunkFrame); made fresh, that is 256 MiB of memory
// touched for the first time beside the payload buffer the chunks are
// copied into, and first touches cost more than the copies on a VM. A
// frame received into a PooledFrame takes its buffer from a pool instead,
// and the receiver gives the buffer back (Recycler) once the assembly
// copied the chunk into the payload: a stage reuses a few hot buffers.

// pooledMin is the smallest frame received into a pooled buffer: smaller
// ones are not worth the bookkeeping (a one-chunk state keeps its frame's
// buffer as its payload anyway).
const pooledMin = 64 << 10

// pooledMax bounds the buffers the pool keeps: a chunk with its framing.
const pooledMax = 16<<20 + 64<<10

var framePool sync.Pool // of *[]byte

func getBuffer(n int) *[]byte {
	if p, ok := framePool.Get().(*[]byte); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n)
	return &b
}

func putBuffer(p *[]byte) {
	if cap(*p) <= pooledMax {
		framePool.Put(p)
	}
}

// PooledFrame is what a receiver passes to a stream's RecvMsg to receive a
// RelocationFrame whose chunk data may sit in a pooled buffer: the frame
// (set it before RecvMsg), embedded so that a stream of another codec
// (a peer that did not ask for meshloc's) decodes it as the plain message;
// and the pooled buffer, if the decoded chunk aliases one (Track).
type PooledFrame struct {
	*pb.RelocationFrame
	buf *[]byte
}

// unmarshalPooled decodes data into f.RelocationFrame, from a pooled buffer when the
// frame is large.
func unmarshalPooled(data mem.BufferSlice, f *PooledFrame) error {
	n := data.Len()
	if n < pooledMin {
		return Codec{}.Unmarshal(data.Materialize(), f.RelocationFrame)
	}
	p := getBuffer(n)
	data.CopyTo(*p)
	return f.decode(p)
}

// decode decodes the frame in the pooled buffer p into f.RelocationFrame. It keeps p
// only when the decoded chunk's data lies in it (a frame proto.Unmarshal
// decodes copies what it keeps), else gives it back.
func (f *PooledFrame) decode(p *[]byte) error {
	if err := (Codec{}).Unmarshal(*p, f.RelocationFrame); err != nil {
		putBuffer(p)
		return err
	}
	if d := f.RelocationFrame.GetChunk().GetData(); len(d) > 0 && within(d, *p) {
		f.buf = p
		return nil
	}
	putBuffer(p)
	return nil
}

// within reports whether d lies inside b.
func within(d, b []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(d)))
	return at >= lo && at+uintptr(len(d)) <= lo+uintptr(len(b))
}

// Recycler gives received frames' pooled buffers back to the pool once
// their chunk data is no longer needed. One per stream: it knows only the
// frames received through it (Track), so a slice it did not hand out is
// never recycled, and what a stream's receiver never recycles is garbage
// collected with the stream. Safe for concurrent use (the stream's reader
// tracks, the relocation's loop recycles).
type Recycler struct {
	mu   sync.Mutex
	live map[*byte]*[]byte // by the chunk data's first byte
}

// Track records f's pooled buffer, if it has one, under its chunk's data.
func (r *Recycler) Track(f *PooledFrame) {
	if f.buf == nil {
		return
	}
	r.mu.Lock()
	if r.live == nil {
		r.live = map[*byte]*[]byte{}
	}
	r.live[unsafe.SliceData(f.RelocationFrame.GetChunk().GetData())] = f.buf
	r.mu.Unlock()
	f.buf = nil
}

// Recycle gives back the buffer of the tracked chunk whose data is d; the
// caller no longer reads or keeps d. Anything else is ignored.
func (r *Recycler) Recycle(d []byte) {
	if len(d) == 0 {
		return
	}
	r.mu.Lock()
	p, ok := r.live[unsafe.SliceData(d)]
	delete(r.live, unsafe.SliceData(d))
	r.mu.Unlock()
	if ok {
		putBuffer(p)
	}
}

// Tracked is the number of buffers tracked and not recycled.
func (r *Recycler) Tracked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}
