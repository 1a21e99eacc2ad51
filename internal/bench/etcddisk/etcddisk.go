// Package etcddisk reads what an etcd member in this process counted of
// its disk (its own histograms, in the default registry), for the bench to
// say whether etcd's disk stalled while a figure was measured.
package etcddisk

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Disk is what this process's etcd member counted of its disk: the
// fsyncs of its write-ahead log and the commits of its backend, by how
// long each took (etcd's own histograms, in the default registry). A run
// whose lateness jumps while etcd's disk stalled can be told from one in
// which meshloc fell behind.
type Disk struct {
	fsync, commit diskOps
}

// diskOps is one histogram: cumulative count by upper bound (seconds).
type diskOps struct {
	count  uint64
	bounds []float64
	cum    []uint64
}

// Read reads the histograms (zero when none is registered).
func Read() Disk {
	var d Disk
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return d
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "etcd_disk_wal_fsync_duration_seconds":
			d.fsync = opsOf(mf)
		case "etcd_disk_backend_commit_duration_seconds":
			d.commit = opsOf(mf)
		}
	}
	return d
}

func opsOf(mf *dto.MetricFamily) diskOps {
	var o diskOps
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		o.count += h.GetSampleCount()
		for i, b := range h.GetBucket() {
			if i >= len(o.bounds) {
				o.bounds, o.cum = append(o.bounds, b.GetUpperBound()), append(o.cum, 0)
			}
			o.cum[i] += b.GetCumulativeCount()
		}
	}
	return o
}

// since describes the operations of o after before: how many, how many
// took over a second, and the bound under which all of them took.
func (o diskOps) since(before diskOps) string {
	n := o.count - before.count
	over, slowest := n, math.Inf(1)
	for i, b := range o.bounds {
		c := o.cum[i]
		if i < len(before.cum) {
			c -= before.cum[i]
		}
		if b >= 1 && over == n {
			over = n - c
		}
		if c == n && math.IsInf(slowest, 1) {
			slowest = b
		}
	}
	return fmt.Sprintf("%d, %d over 1 s, all under %gs", n, over, slowest)
}

// Since describes d's operations after before.
func (d Disk) Since(before Disk) string {
	return fmt.Sprintf("WAL fsyncs %s; backend commits %s", d.fsync.since(before.fsync), d.commit.since(before.commit))
}
