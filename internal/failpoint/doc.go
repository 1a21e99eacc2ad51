// Package failpoint injects faults at named points of meshloc's code: the
// steps of a relocation and of drain (TESTING.md "Named failpoints"). It is
// compiled in only with the build tag `failpoints`; without it every call is
// an empty function the compiler removes.
//
// Points are enabled by name, in process (Enable) or for a whole process from
// the environment: MESHLOC_FAILPOINTS="source.after-seal=crash;target.before-commit=error@2".
// Actions:
//
//	error      Hit returns ErrInjected (the step fails as if its I/O failed)
//	crash      the process kills itself with SIGKILL at that point (kill -9)
//	pause      the goroutine blocks forever (a hung process; SIGKILL it)
//	sleep:D    sleep for the duration D (e.g. sleep:3s)
//	corrupt    Corrupt flips one byte of the data passing the point
//
// A suffix @N fires the action only at the N-th hit of the point (1-based);
// without it every hit fires. Every firing is logged on stderr as
// "failpoint: <name> <action>" so a test can wait for it.
package failpoint

import "errors"

// ErrInjected is returned by Hit for the action "error".
var ErrInjected = errors.New("failpoint: injected error")

// The named points.
const (
	SourceAfterSeal      = "source.after-seal"       // captured, nothing sent yet
	SourceChunk          = "source.chunk"            // before each STATE chunk (@k: chunk k)
	SourceChunkData      = "source.chunk-data"       // the bytes of each STATE chunk (corrupt@k)
	SourceAfterLastChunk = "source.after-last-chunk" // every chunk sent, before READY
	SourceBeforeCutover  = "source.before-cutover"   // READY received, before DATA and CUTOVER
	TargetBeforeReady    = "target.before-ready"     // restored, before READY is decided
	TargetBeforeCommit   = "target.before-commit"    // CUTOVER received, before the commit Txn
	TargetAfterCommit    = "target.after-commit"     // commit applied, its reply not yet read
	TargetBeforeReplay   = "target.before-replay"    // committed, before captured requests run
	TargetBeforeRelay    = "target.before-relay"     // before a reply relay is sent
	DrainStep            = "drain"                   // during drain, between objects
)
