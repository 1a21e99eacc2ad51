package authority

import "time"

// SetListScanMax lowers the records one ListPage reads, for a test; the
// returned function restores it.
func SetListScanMax(n int) (restore func()) {
	old := listScanMax
	listScanMax = n
	return func() { listScanMax = old }
}

// SetCacheClock gives c a clock of the test's, before it runs.
func SetCacheClock(c *Cache, now func() time.Time) { c.now = now }
