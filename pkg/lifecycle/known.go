package lifecycle

// Since is what became of the object a caller knew, judged by Known.
type Since int

const (
	// Same: serve the call (the caller knew no generation, this one, or a
	// durable object's older one, whose state was carried over).
	Same Since = iota
	// Deleted: the object the caller knew was deleted (CODE_DELETED).
	Deleted
	// StateLost: a memory object the caller knew died with its owner and
	// was re-created empty (CODE_STATE_LOST).
	StateLost
)

// Known is the one rule that tells a caller what became of the object it
// knew at object generation known (0: none), now that its name's object is
// of generation current, the last deleted one was deleted (0: none), and
// its type is durable or not. Nothing is executed for a caller told
// Deleted or StateLost: it must learn of it, never see a silent fresh
// start.
func Known(known, current, deleted int64, durable bool) Since {
	switch {
	case known == 0 || known >= current:
		return Same
	case known <= deleted:
		return Deleted
	case !durable:
		return StateLost
	}
	return Same
}

// MadeBefore reports whether an operation made at opMs (Unix ms, from its
// UUIDv7 id; 0: none) was made no later than the name's last delete, at
// deletedAtMs (0: never deleted): it was addressed to the deleted object,
// which may have run it, so it must not run on the new one (CODE_DELETED).
func MadeBefore(opMs, deletedAtMs int64) bool {
	return deletedAtMs > 0 && opMs > 0 && opMs <= deletedAtMs
}
