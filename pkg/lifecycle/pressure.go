package lifecycle

// Memory limits (docs/developing/lifecycle.md, "Memory limits"): a node
// bounds the objects it holds awake and the memory they take. Over the
// soft bound (SoftShare of either limit) it puts its least recently used
// objects that may sleep to sleep, whatever their idle time; at the hard
// bound (either limit reached) it refuses to take new objects (a first
// call, a wake, a recovery), which then go to another node.

// SoftShare is the share of a limit above which a node sheds objects.
const SoftShare = 0.9

// Limits are a node's bounds (meshnode --max-objects, --memory-limit);
// 0: none.
type Limits struct {
	MaxObjects int
	MaxBytes   int64
}

// Load is what a node holds: objects in memory, and the bytes of its heap
// in use.
type Load struct {
	Objects int
	Bytes   int64
}

// Level is where a load stands against limits.
type Level int

// Levels, from no pressure to full.
const (
	Under Level = iota
	Soft
	Hard
)

func (l Level) String() string {
	switch l {
	case Soft:
		return "soft"
	case Hard:
		return "hard"
	}
	return "under"
}

// Enabled reports whether any limit is set.
func (l Limits) Enabled() bool { return l.MaxObjects > 0 || l.MaxBytes > 0 }

func (l Limits) softObjects() int { return int(float64(l.MaxObjects) * SoftShare) }
func (l Limits) softBytes() int64 { return int64(float64(l.MaxBytes) * SoftShare) }

// Level is ld's level: Hard when a limit is reached, Soft when over the
// soft share of one, Under otherwise.
func (l Limits) Level(ld Load) Level {
	switch {
	case l.MaxObjects > 0 && ld.Objects >= l.MaxObjects, l.MaxBytes > 0 && ld.Bytes >= l.MaxBytes:
		return Hard
	case l.MaxObjects > 0 && ld.Objects > l.softObjects(), l.MaxBytes > 0 && ld.Bytes > l.softBytes():
		return Soft
	}
	return Under
}

// Shed is how many objects to put to sleep to bring ld back under the soft
// bounds: the excess over the soft object count, and for memory the share
// of the objects that the excess bytes are of the heap (objects are taken
// to weigh alike: the next look corrects an estimate that fell short).
func (l Limits) Shed(ld Load) int {
	n := 0
	if l.MaxObjects > 0 && ld.Objects > l.softObjects() {
		n = ld.Objects - l.softObjects()
	}
	if l.MaxBytes > 0 && ld.Bytes > l.softBytes() && ld.Bytes > 0 {
		excess := float64(ld.Bytes-l.softBytes()) / float64(ld.Bytes)
		n = max(n, int(excess*float64(ld.Objects)+0.999))
	}
	return min(n, ld.Objects)
}
