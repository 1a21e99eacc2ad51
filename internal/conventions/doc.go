// Package conventions holds no code: its tests check rules of the whole
// repository that no single package can (every package documented, no
// hand-written file over 700 lines, faults only in test builds).
package conventions
