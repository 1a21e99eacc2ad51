// Package memory measures meshloc's memory targets on real processes (RSS
// per hosted object, per cached location). It has benchmarks only: go test
// runs nothing here unless -bench asks.
package memory
