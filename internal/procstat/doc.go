// Package procstat reads another process's CPU time and resident set off
// /proc (Linux; elsewhere both are errors): what the benchmarks measure
// of the processes they start.
package procstat
