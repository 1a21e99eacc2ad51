// Package faults holds the relocation seams' named faults and planted bugs
// (internal/failpoint) that act on a stream, a store or a mailbox without
// reaching into the node: test builds (tag failpoints) wrap the node's
// seams with them; a production build compiles none of it (this file
// alone).
package faults
